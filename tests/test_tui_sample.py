"""A small hand-made trace whose lanes, links and idle gaps the TUI tests know exactly."""

from __future__ import annotations

EVIL_NAME = "\x1b[31mEVIL\x1b[0m\x07"
MARKUP_NAME = "[bold]not markup[/bold] [memory]"


def _x(name, cat, ts, dur, pid=100, tid=100, **args):
    event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        event["args"] = args
    return event


def sample_trace() -> dict:
    """One process with two threads, one GPU with two streams, four idle gaps.

    GPU gaps (µs): [150, 650) host_wait, [660, 700) host_wait, [705, 705.005) kernel_wait,
    [720.005, 740) kernel_wait.
    """
    meta = [
        {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_sort_index", "pid": 100, "tid": 0, "args": {"sort_index": 1}},
        {
            "ph": "M",
            "name": "thread_name",
            "pid": 100,
            "tid": 100,
            "args": {"name": "thread 100 (python)"},
        },
        {
            "ph": "M",
            "name": "thread_name",
            "pid": 100,
            "tid": 101,
            "args": {"name": "thread 101 (loader)"},
        },
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
        {"ph": "M", "name": "process_sort_index", "pid": 0, "tid": 0, "args": {"sort_index": 5}},
    ]
    cpu = [
        _x("ProfilerStep#1", "user_annotation", 0, 1000),
        _x("nn.Module: Linear", "python_function", 5, 305),
        _x("aten::linear", "cpu_op", 10, 290, **{"Input Dims": [[4, 8]], "External id": 7}),
        _x("aten::mm", "cpu_op", 20, 100),
        _x("cudaLaunchKernel", "cuda_runtime", 30, 10, correlation=1),
        _x("cudaLaunchKernel", "cuda_runtime", 100, 5, correlation=4),
        _x("cudaLaunchKernel", "cuda_runtime", 150, 10, correlation=5),
        _x("aten::copy_", "cpu_op", 400, 200),
        _x("cudaMemcpyAsync", "cuda_runtime", 410, 10, correlation=2),
        _x("cudaLaunchKernel", "cuda_runtime", 690, 5, correlation=3),
        _x(EVIL_NAME, "cpu_op", 50, 400, tid=101),
        _x(MARKUP_NAME, "cpu_op", 500, 300, tid=101),
    ]
    gpu = [
        _x("gemm_kernel", "kernel", 50, 100, pid=0, tid=7, device=0, stream=7, correlation=1),
        _x("Memcpy HtoD", "gpu_memcpy", 650, 10, pid=0, tid=7, device=0, stream=7, correlation=2),
        _x("relu_kernel", "kernel", 700, 5, pid=0, tid=13, device=0, stream=13, correlation=3),
        _x("add_kernel", "kernel", 705.005, 15, pid=0, tid=7, device=0, stream=7, correlation=4),
        _x("sum_kernel", "kernel", 740, 10, pid=0, tid=7, device=0, stream=7, correlation=5),
    ]
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "Test GPU"}],
        "traceEvents": meta + cpu + gpu,
    }
