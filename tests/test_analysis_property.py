"""Random small traces: the vectorised summary must equal the plain reference, field by field."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kinetoscope.analysis.summary import build_summary
from kinetoscope.parser import loads
from spec_reference import contract_view, summarize

CATS = [
    "cpu_op",
    "cpu_op",
    "cuda_runtime",
    "cuda_runtime",
    "cuda_runtime",
    "kernel",
    "kernel",
    "user_annotation",
    "cuda_runtime",
    "Runtime",
    "cuda_driver",
    "kernel",
    "Kernel",
    "gpu_memcpy",
    "Memset",
    "gpu_user_annotation",
    "cuda_sync",
    "Trace",
    None,
]
NAMES = [
    "aten::mm",
    "aten::add",
    "ProfilerStep#1",
    "ProfilerStep#22",
    "ProfilerStep#x",
    "enumerate(DataLoader)#_Iter.__next__",
    "cudaLaunchKernel",
    "aten::mm",
    "aten::mm",
    "ProfilerStep#1",
    "ncclKernel_AllReduce",
    "",
    None,
]
# Weighted towards a few lanes so that slices nest, overlap and link often.
IDS = st.sampled_from([1, 1, 1, 1, 1, 1, 0, 0, 2, "1", "007", "stream 7", ""])
TIMES = st.one_of(
    st.integers(0, 60),
    st.sampled_from([0.5, 1.5, 2.0005, 10.25, 29.9995, 30.0, 59.999]),
)
DURS = st.one_of(
    st.integers(0, 40),
    st.sampled_from([0.0005, 0.0015, 2.5, -3, True, "5", None, 30.0]),
)


@st.composite
def slice_events(draw):
    cat = draw(st.sampled_from(CATS))
    gpu = cat is not None and cat.lower() in ("kernel", "gpu_memcpy", "memset")
    if gpu and draw(st.integers(0, 3)):
        pid, tid = draw(st.sampled_from([0, 0, 0, 1])), 7
    else:
        pid, tid = draw(IDS), draw(IDS)
    event = {"ph": "X", "ts": draw(TIMES), "pid": pid, "tid": tid}
    if cat is not None:
        event["cat"] = cat
    name = draw(st.sampled_from(NAMES))
    if name is not None or draw(st.booleans()):
        event["name"] = name
    dur = draw(DURS)
    if dur is not None:
        event["dur"] = dur
    args = {}
    if draw(st.integers(0, 3)):
        args["correlation"] = draw(st.sampled_from([0, 1, 2, 3, 1, 2, 3, "3", True]))
    if draw(st.integers(0, 3)) == 0:
        args["device"] = draw(st.sampled_from([0, 1, "1"]))
    if args:
        event["args"] = args
    if draw(st.integers(0, 15)) == 0:
        del event["ts"]
    return event


@st.composite
def memory_events(draw):
    args = {}
    for key in ("Device Type", "Device Id", "Total Allocated", "Total Reserved"):
        if draw(st.booleans()):
            args[key] = draw(st.sampled_from([0, 1, 2, -1, 1024, 4096.0, None]))
    event = {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "s": "t", "args": args}
    if draw(st.booleans()):
        event["ts"] = draw(TIMES)
    return event


EVENTS = st.lists(
    st.one_of(
        slice_events(),
        slice_events(),
        slice_events(),
        memory_events(),
        st.just({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "p"}}),
        st.just({"ph": "i", "name": "mark", "ts": 3, "pid": 1, "tid": 1}),
        st.just(7),
    ),
    min_size=4,
    max_size=40,
)


def comparable(summary: dict, reference: dict) -> dict:
    """The keys of the contract the reference computes (no findings, warnings or source)."""
    return contract_view(summary, reference)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(EVENTS)
def test_summary_equals_reference_on_random_traces(events):
    doc = {"schemaVersion": 1, "traceEvents": events}
    expected = summarize(json.loads(json.dumps(doc)))
    got = comparable(build_summary(loads(json.dumps(doc).encode())), expected)
    assert_same(got, expected)


def assert_same(got: dict, expected: dict) -> None:
    """Equal, with ints and floats kept apart (1 == 1.0 and True == 1 in Python)."""
    assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True), (got, expected)


@settings(max_examples=100, deadline=None)
@given(st.lists(slice_events(), max_size=30))
def test_bare_array_equals_reference(events):
    expected = summarize(json.loads(json.dumps(events)))
    got = comparable(build_summary(loads(json.dumps(events).encode())), expected)
    assert_same(got, expected)


@st.composite
def linked_traces(draw):
    """Dense traces: nested CPU slices on two lanes, runtime calls, and GPU work they launched."""
    events = []
    n_cpu = draw(st.integers(1, 25))
    correlations = []
    for _ in range(n_cpu):
        cat = draw(st.sampled_from(["cpu_op", "cpu_op", "cuda_runtime", "user_annotation"]))
        name = draw(st.sampled_from(["a", "b", "a", "ProfilerStep#3", "enumerate(DataLoader)#x"]))
        event = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": 1,
            "tid": draw(st.sampled_from([1, 1, 1, 2])),
            "ts": draw(st.integers(0, 50)),
            "dur": draw(st.integers(0, 30)),
        }
        if cat == "cuda_runtime":
            corr = draw(st.integers(0, 6))
            correlations.append(corr)
            event["args"] = {"correlation": corr}
        events.append(event)
    for _ in range(draw(st.integers(0, 12))):
        corr = draw(st.sampled_from(correlations + [99])) if correlations else 99
        events.append(
            {
                "ph": "X",
                "cat": draw(st.sampled_from(["kernel", "kernel", "gpu_memcpy", "gpu_memset"])),
                "name": draw(st.sampled_from(["k1", "k2", "ncclAllReduce"])),
                "pid": draw(st.sampled_from([0, 0, 1])),
                "tid": draw(st.sampled_from([7, 8])),
                "ts": draw(st.integers(0, 90)),
                "dur": draw(st.sampled_from([0, 1, 5, 10, 29, 30, 31, 45])),
                "args": {"correlation": corr},
            }
        )
    return draw(st.permutations(events))


@settings(max_examples=250, deadline=None)
@given(linked_traces())
def test_dense_linked_traces_equal_reference(events):
    expected = summarize(json.loads(json.dumps({"traceEvents": events})))
    got = comparable(build_summary(loads(json.dumps({"traceEvents": events}).encode())), expected)
    assert_same(got, expected)
