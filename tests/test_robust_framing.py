"""Framing and reading under hostile conditions (issue 20): a file replaced or rewritten while it
loads, brackets out of place in the events array, whitespace bombs, and files that are not
regular files (named pipes, /dev/stdin, `<(...)`)."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from kinetoscope.parser import TraceError, loads
from kinetoscope.parser import reader as reader_module
from kinetoscope.parser import source as source_module
from kinetoscope.parser.parallel import (
    FILE_CHANGED,
    FileIdentity,
    decode_file_run,
    identity_of,
    read_trace,
)
from kinetoscope.parser.reader import next_non_ws, resync_point
from kinetoscope.parser.source import open_source

TIMEOUT = 120


def _events(n: int, tag: str) -> list[dict]:
    return [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"{tag}{i % 40}",
            "pid": 1,
            "tid": 1,
            "ts": i * 2,
            "dur": 1,
            "args": {"External id": i, "Input Dims": [[i % 5, 3], []]},
        }
        for i in range(n)
    ]


def _trace_text(n: int, tag: str = "op") -> str:
    body = ",\n  ".join(json.dumps(e) for e in _events(n, tag))
    return '{"schemaVersion": 1, "traceEvents": [\n  ' + body + '\n], "displayTimeUnit": "ms"}'


def _names(trace) -> set[str]:
    return {trace.name_of(row) for row in range(len(trace))}


@pytest.fixture
def small_runs(monkeypatch):
    """Runs of 256 KB read in blocks of 64 KB: a file of a few MB is many runs, handed to the
    workers (or decoded) one after another."""
    monkeypatch.setattr(reader_module, "RUN_BYTES", 1 << 18)
    monkeypatch.setattr(source_module, "READ_BLOCK", 1 << 16)


# -- 1. a file replaced while it loads is never mixed with the new one -------------------------


def _swap_on_first_progress(old: Path, new: Path):
    calls: list[int] = []

    def progress(done: int, total: int, events: int) -> None:
        if not calls:
            os.replace(new, old)  # `mv new old` while the load runs
        calls.append(done)

    return progress, calls


@pytest.mark.parametrize("workers", [2, 1], ids=["workers", "one-process"])
def test_a_file_replaced_while_it_loads_is_read_as_it_was_opened(tmp_path, small_runs, workers):
    old, new = tmp_path / "A.json", tmp_path / "B.json"
    old.write_text(_trace_text(30000, "old"))
    new.write_text(_trace_text(30000, "new"))
    progress, calls = _swap_on_first_progress(old, new)
    trace = read_trace(str(old), progress, workers=workers)
    # The swap happened after the first run was merged: most runs were handed to the workers
    # after it, and those used to read the new file by its path.
    assert len(calls) > 5
    assert getattr(trace, "workers", 1) == workers
    assert trace.n_events == 30000
    assert {name[:3] for name in _names(trace)} == {"old"}
    assert trace.complete
    assert any("replaced on disk while it loaded" in w for w in trace.warnings)


@pytest.mark.parametrize("workers", [2, 1], ids=["workers", "one-process"])
def test_a_file_rewritten_in_place_while_it_loads_is_an_error(tmp_path, small_runs, workers):
    path = tmp_path / "A.json"
    path.write_text(_trace_text(30000, "old"))
    replacement = _trace_text(30000, "new").encode()
    calls: list[int] = []

    def progress(done: int, total: int, events: int) -> None:
        if not calls:
            with open(path, "r+b") as handle:  # `cat B.json > A.json`: the same inode
                handle.write(replacement)
                handle.truncate()
        calls.append(done)

    with pytest.raises(TraceError, match="changed while it was being read"):
        read_trace(str(path), progress, workers=workers)


def test_a_worker_never_reads_another_file_than_the_one_opened(tmp_path):
    path = tmp_path / "A.json"
    first = json.dumps(_events(1, "old")[0]).encode()
    path.write_bytes(b"[" + first + b"]")
    state = open_source(str(path))
    identity = identity_of(state)
    assert identity is not None
    try:
        replacement = tmp_path / "B.json"
        replacement.write_bytes(b"[" + json.dumps(_events(1, "new")[0]).encode() + b"]")
        os.replace(replacement, path)
        # Through the loading process's descriptor it is still the file that was opened ...
        run = decode_file_run(identity, 1, len(first))
        assert run is not None and run != FILE_CHANGED
        # ... and where that is not possible (another system, or /proc hidden), the path names
        # another file now, which the worker refuses instead of reading it.
        elsewhere = FileIdentity(str(path), 2**22 + 1, 999_999, *identity[3:])
        assert decode_file_run(elsewhere, 1, len(first)) == FILE_CHANGED
    finally:
        state.close()


# -- 2. a bracket out of place does not end the read -------------------------------------------

N_STRAY = 6000


def _with_stray(kind: str) -> tuple[bytes, int]:
    """The trace with a bracket out of place two thirds of the way in, and the events that must
    load (all but the event that holds the damage, if any)."""
    text = _trace_text(N_STRAY)
    cut = text.find("},\n  {", len(text) * 2 // 3) + 1  # just after an event's `}`
    inside = text.find('"ph": "X"', cut) + len('"ph": "X"')  # inside the next event
    damaged = {
        "] between events": (text[:cut] + "]" + text[cut:], N_STRAY),
        "} between events": (text[:cut] + "}" + text[cut:], N_STRAY),
        "] after the comma": (text[: cut + 1] + " ]" + text[cut + 1 :], N_STRAY),
        "] for the comma": (text[:cut] + "]" + text[cut + 1 :], N_STRAY),
        "] in an event": (text[:inside] + "]" + text[inside:], N_STRAY - 1),
        "[ in an event": (text[:inside] + ', "x": [' + text[inside:], N_STRAY - 1),
        "{ in an event": (text[:inside] + ', "x": {' + text[inside:], N_STRAY - 1),
    }
    return damaged[kind][0].encode(), damaged[kind][1]


STRAYS = [
    "] between events",
    "} between events",
    "] after the comma",
    "] for the comma",
    "] in an event",
    "[ in an event",
    "{ in an event",
]


@pytest.mark.parametrize("kind", STRAYS)
def test_a_bracket_out_of_place_loses_at_most_its_event(kind):
    data, expected = _with_stray(kind)
    trace = loads(data)
    assert trace.n_events == expected
    assert trace.complete
    assert trace.header.get("displayTimeUnit") == "ms"  # the header after the array is read too
    warning = " ".join(trace.warnings)
    assert re.search(r"skipped \d+ bytes? of malformed data at byte \d+|malformed event", warning)


@pytest.mark.parametrize("kind", ["] between events", "[ in an event"])
@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("workers", [1, 2])
def test_a_bracket_out_of_place_in_a_file_on_every_path(
    tmp_path, small_runs, kind, compress, workers
):
    data, expected = _with_stray(kind)
    path = tmp_path / ("t.json.gz" if compress else "t.json")
    path.write_bytes(gzip.compress(data, 1) if compress else data)
    trace = read_trace(str(path), workers=workers)
    assert trace.n_events == expected and trace.complete
    offsets = [int(m) for w in trace.warnings for m in re.findall(r"at byte (\d+)", w)]
    assert offsets and abs(offsets[0] - len(data) * 2 // 3) < 1000


def test_the_skipped_count_is_given_when_there_are_many():
    text = _trace_text(3000)
    pieces = text.split("},\n  {")
    damaged = "},\n  {".join(p + ("}" if i % 100 == 50 else "") for i, p in enumerate(pieces))
    trace = loads(damaged.encode())
    assert trace.n_events == 3000
    assert any("skipped 30 malformed events or stray brackets in all" in w for w in trace.warnings)


def test_resync_point_is_found_only_where_an_event_starts_too_deep():
    clean = b'{"ph": "X", "args": {"l": [{"name": 1}, {"name": 2}]}}, {"ph": "X"}'
    assert resync_point(clean) is None  # nested dicts with event keys are not event starts
    damaged = b'{"ph": "X", "a": [1, 2}, {"ph": "X", "name": "next"}'
    comma, brace = resync_point(damaged)
    assert damaged[comma] == ord(",") and damaged[brace:].startswith(b'{"ph": "X", "name"')
    in_string = b'{"ph": "X", "s": "[, {\\"ph\\": 1"}, {"ph": "X"}'
    assert resync_point(in_string) is None


# -- 3. whitespace bombs -----------------------------------------------------------------------


def test_next_non_ws_matches_a_regular_expression():
    import random

    rng = random.Random(20)
    pattern = re.compile(rb"[^ \t\r\n]")
    for _ in range(400):
        size = rng.choice([0, 1, 7, 4095, 4096, 4097, 70_000, 140_000])
        data = bytearray(rng.choice(b" \t\r\n") for _ in range(size))
        if rng.random() < 0.8:
            data.insert(rng.randrange(len(data) + 1), rng.choice([0, 1, 8, 11, 12, 31, 33, 255]))
        data = bytes(data)
        pos = rng.randrange(len(data) + 1)
        found = pattern.search(data, pos)
        assert next_non_ws(data, pos) == (found.start() if found else len(data))


@pytest.mark.parametrize(
    "where",
    ["between an event and its comma", "after a comma", "before the closing bracket", "leading"],
)
def test_whitespace_between_events_is_skipped_small(where):
    text = _trace_text(50)
    blank = " \n\t\r" * 5000
    at = {
        "between an event and its comma": text.find("},") + 1,
        "after a comma": text.find("},") + 2,
        "before the closing bracket": text.rfind("]"),
        "leading": 0,
    }[where]
    trace = loads((text[:at] + blank + text[at:]).encode())
    assert trace.n_events == 50 and trace.complete and not trace.warnings


BOMB_MB = 400
_BOMB = """
import json, sys, time
from kinetoscope.parser.parallel import read_trace
started = time.perf_counter()
trace = read_trace(sys.argv[1], workers=1)
# VmHWM is this program's own peak: getrusage's ru_maxrss keeps the forking parent's peak across
# exec, so a big pytest process would be measured instead.
with open("/proc/self/status") as status:
    peak_kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(json.dumps({"events": trace.n_events, "complete": trace.complete,
                  "seconds": time.perf_counter() - started, "peak_mb": peak_kb / 1024}))
"""


def _bomb(path: Path, where: str) -> None:
    events = [json.dumps(e).encode() for e in _events(2000, "op")]
    blank = b" " * (1 << 20)
    head, tail = b'{"traceEvents": [', b'], "displayTimeUnit": "ms"}'
    first, second = b",\n".join(events[:1000]), b",\n".join(events[1000:])
    with gzip.open(path, "wb", compresslevel=1) as out:
        if where == "leading":
            out.writelines([blank] * BOMB_MB)
            out.write(head + first + b",\n" + second + tail)
        else:
            out.write(head + first)  # the whitespace between an event and its comma
            out.writelines([blank] * BOMB_MB)
            out.write(b",\n" + second + tail)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["leading", "in the events array"])
def test_a_whitespace_bomb_costs_time_at_memory_speed_and_no_memory(tmp_path, where):
    # 2 GB of leading whitespace took over 90 s; 6 GB inside the array ran out of memory.
    path = tmp_path / "bomb.json.gz"
    _bomb(path, where)
    result = subprocess.run(
        [sys.executable, "-c", _BOMB, str(path)], capture_output=True, timeout=TIMEOUT
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    measured = json.loads(result.stdout)
    assert measured["events"] == 2000 and measured["complete"]
    assert measured["seconds"] < 20  # was about 50 s for 400 MB (leading)
    assert measured["peak_mb"] < 350  # was about 1.3 GB for 400 MB (in the array)


# -- 4. pipes and other files that are not regular files --------------------------------------


def _summary(path: str, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run(
        [sys.executable, "-m", "kinetoscope", "summary", path, "--json"],
        capture_output=True,
        timeout=TIMEOUT,
        env=env,
        **kwargs,
    )


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_summary_reads_a_trace_piped_to_dev_stdin(compress):
    data = _trace_text(3000).encode()
    result = _summary("/dev/stdin", input=gzip.compress(data) if compress else data)
    assert result.returncode == 0, result.stderr.decode()
    document = json.loads(result.stdout)
    assert document["trace"]["events"] == 3000
    assert document["source"]["compressed"] is compress


def test_summary_reads_a_process_substitution(tmp_path):
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(_trace_text(3000).encode()))
    if not Path("/bin/bash").exists():
        pytest.skip("needs bash for <(...)")
    script = f'"{sys.executable}" -m kinetoscope summary <(cat "{path}") --json'
    result = subprocess.run(
        ["/bin/bash", "-c", script], capture_output=True, timeout=TIMEOUT, env=dict(os.environ)
    )
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout)["trace"]["events"] == 3000


def test_a_named_pipe_no_one_writes_to_never_hangs(tmp_path):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    result = _summary(str(fifo))  # used to block in open() forever
    assert result.returncode == 1
    assert result.stderr.decode().count("\n") == 1 and "nothing to read" in result.stderr.decode()
    code = "from kinetoscope.parser import load; load(__import__('sys').argv[1], use_cache=False)"
    library = subprocess.run(
        [sys.executable, "-c", code, str(fifo)], capture_output=True, timeout=TIMEOUT
    )
    assert library.returncode == 1 and b"TraceError" in library.stderr


def test_a_named_pipe_is_read_as_a_stream_in_one_process(tmp_path):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    data = _trace_text(3000).encode()
    failures: list[BaseException] = []

    def write() -> None:
        try:
            with open(fifo, "wb") as out:  # waits for the reader, then writes in pieces
                for at in range(0, len(data), 5000):
                    out.write(data[at : at + 5000])
        except BaseException as error:  # noqa: BLE001 - reported by the test
            failures.append(error)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    trace = read_trace(str(fifo), workers=4)  # a stream is never handed to workers
    writer.join(TIMEOUT)
    assert not failures
    assert trace.n_events == 3000 and trace.complete
    assert getattr(trace, "workers", 1) == 1
    assert trace.source.bytes == len(data)


def test_a_terminal_is_refused(tmp_path):
    import pty

    leader, follower = pty.openpty()
    try:
        with pytest.raises(TraceError, match="is a terminal"):
            read_trace(os.ttyname(follower))
    finally:
        os.close(leader)
        os.close(follower)
