"""Synthetic Kineto-style GPU training traces, with gaps and times known exactly.

Nothing here imports torch: the generator writes the Chrome-trace JSON that torch.profiler /
libkineto would write (recent format: `schemaVersion`, `deviceProperties`, timestamps in
microseconds with 3 decimals relative to `baseTimeNanoseconds`, `ac2g` flow events, process
and thread metadata), so tests and the sample trace need no GPU.

Two layers:

* `TraceBuilder`: place events by hand. Times are microseconds since the trace's origin
  (`TraceBuilder.origin_us` is the file `ts` of time 0); they are kept as integer nanoseconds,
  so a gap placed at 1200.5 us for 30 us is exactly that in the file.

      b = TraceBuilder()
      b.add_step(1, start=0, dur=1000)
      launch = b.add_runtime("cudaLaunchKernel", start=10, dur=5)
      b.add_kernel(7, start=20, dur=100, name="gemm", launched_by=launch)
      b.add_kernel(7, start=300, dur=50, name="relu")   # GPU idle from 120 to 300
      trace = b.to_dict()                               # or b.write("t.pt.trace.json.gz")

* `build_training_trace(seed=0, steps=4)`: a whole training run on one GPU with a main thread,
  a DataLoader pin-memory thread, two streams, and one step each of: normal, DataLoader stall,
  `.item()` sync stall, launch-bound stretch. Where those are is recorded in the top-level key
  `kinetoscopeSynthetic`.

`python -m kinetoscope.capture.synthetic OUT` writes the sample trace.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GENERATOR = "kinetoscope.capture.synthetic"
SAMPLE_NAME = "synthetic_gpu_training.pt.trace.json.gz"
DATALOADER_NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")

# Kineto's callback ids for the runtime calls used here (written as args.cbid).
_CBID = {
    "cudaLaunchKernel": 211,
    "cudaMemcpyAsync": 41,
    "cudaMemsetAsync": 51,
    "cudaStreamSynchronize": 131,
    "cudaDeviceSynchronize": 165,
    "cudaStreamWaitEvent": 147,
    "cudaEventRecord": 135,
}


def _ns(us: float) -> int:
    """Microseconds (int or float) to integer nanoseconds, rounding halves to even."""
    return round(us * 1000)


@dataclass(frozen=True)
class Gap:
    """A hole in a device's GPU busy time, in microseconds since the trace origin."""

    start_ns: int
    end_ns: int

    @property
    def start(self) -> float:
        return self.start_ns / 1000

    @property
    def dur(self) -> float:
        return (self.end_ns - self.start_ns) / 1000

    def contains(self, t_us: float) -> bool:
        return self.start_ns <= _ns(t_us) < self.end_ns


@dataclass
class _Launch:
    correlation: int
    external_id: int
    tid: int
    start_ns: int


class TraceBuilder:
    """Collects events for one process with CPU threads and one GPU, and writes Kineto JSON."""

    def __init__(
        self,
        *,
        pid: int = 4242,
        main_tid: int | None = None,
        device: int = 0,
        device_name: str = "Synthetic GPU (kinetoscope generator)",
        process_name: str = "python3",
        base_time_ns: int = 1_750_000_000_000_000_000,
        origin_us: int = 2_000_000_000,
    ) -> None:
        self.pid = pid
        self.main_tid = pid if main_tid is None else main_tid
        self.device = device
        self.device_name = device_name
        self.process_name = process_name
        self.base_time_ns = base_time_ns
        self.origin_us = origin_us
        self._origin_ns = origin_us * 1000
        self._events: list[dict[str, Any]] = []
        self._threads: dict[int, str] = {}
        self._streams: set[tuple[int, int]] = set()
        self._launches: dict[int, _Launch] = {}
        self._gpu: list[tuple[int, int, int]] = []  # (device, start_ns, end_ns)
        self._next_correlation = 1000
        self._next_external = 1
        self._extra: dict[str, Any] = {}
        self.add_thread("pt_main_thread", tid=self.main_tid)

    # times ---------------------------------------------------------------------------------

    def ts(self, t_us: float) -> float:
        """The file `ts` value for a time in microseconds since the origin."""
        return self._file_us(_ns(t_us))

    def _file_us(self, t_ns: int) -> float:
        return round((self._origin_ns + t_ns) / 1000, 3)

    def _dur_us(self, dur_ns: int) -> float:
        return round(dur_ns / 1000, 3)

    # threads and CPU events ------------------------------------------------------------------

    def add_thread(self, name: str, tid: int | None = None) -> int:
        """Declare a CPU thread (named like Kineto does: `thread TID (NAME)`); returns its tid."""
        if tid is None:
            tid = max(self._threads, default=self.pid) + 1
        self._threads[tid] = name
        return tid

    def _external(self) -> int:
        self._next_external += 1
        return self._next_external - 1

    def add_cpu(
        self,
        name: str,
        start: float,
        dur: float,
        *,
        cat: str = "cpu_op",
        tid: int | None = None,
        args: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A CPU slice (`ph: X`) on a thread of the process (the main thread by default)."""
        tid = self.main_tid if tid is None else tid
        if tid not in self._threads:
            self.add_thread(f"thread {tid}", tid=tid)
        event_args = {"External id": self._external()}
        event_args.update(args or {})
        event = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": self.pid,
            "tid": tid,
            "ts": self.ts(start),
            "dur": self._dur_us(_ns(dur)),
            "args": event_args,
        }
        self._events.append(event)
        return event

    def add_annotation(self, name: str, start: float, dur: float, *, tid: int | None = None):
        """A `user_annotation` slice (record_function ranges, ProfilerStep, DataLoader)."""
        return self.add_cpu(name, start, dur, cat="user_annotation", tid=tid)

    def add_step(self, number: int, start: float, dur: float, *, tid: int | None = None):
        """A `ProfilerStep#N` slice; its GPU-side twin is added by `to_dict`."""
        return self.add_annotation(f"ProfilerStep#{number}", start, dur, tid=tid)

    def add_dataloader(self, start: float, dur: float, *, tid: int | None = None):
        """The main thread waiting for the next batch of a single-process DataLoader."""
        return self.add_annotation(DATALOADER_NEXT, start, dur, tid=tid)

    def add_runtime(
        self,
        name: str,
        start: float,
        dur: float,
        *,
        tid: int | None = None,
        cat: str = "cuda_runtime",
    ) -> int:
        """A CUDA runtime call on a CPU thread; returns its correlation id for `launched_by`."""
        tid = self.main_tid if tid is None else tid
        correlation = self._next_correlation
        self._next_correlation += 1
        external = self._external()
        self._events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": self.pid,
                "tid": tid,
                "ts": self.ts(start),
                "dur": self._dur_us(_ns(dur)),
                "args": {
                    "External id": external,
                    "cbid": _CBID.get(name, 0),
                    "correlation": correlation,
                },
            }
        )
        self._launches[correlation] = _Launch(correlation, external, tid, _ns(start))
        return correlation

    def add_memory(
        self,
        t: float,
        bytes_: int,
        *,
        total_allocated: int,
        total_reserved: int,
        addr: int = 0x7F00_0000_0000,
        device_id: int | None = None,
        device_type: int = 1,
        tid: int | None = None,
    ) -> dict[str, Any]:
        """A `[memory]` instant event (an allocation when bytes > 0, a free when < 0)."""
        event = {
            "ph": "i",
            "cat": "cpu_instant_event",
            "s": "t",
            "name": "[memory]",
            "pid": self.pid,
            "tid": self.main_tid if tid is None else tid,
            "ts": self.ts(t),
            "args": {
                "Total Reserved": total_reserved,
                "Total Allocated": total_allocated,
                "Bytes": bytes_,
                "Addr": addr,
                "Device Id": self.device if device_id is None else device_id,
                "Device Type": device_type,
            },
        }
        self._events.append(event)
        return event

    # GPU events ------------------------------------------------------------------------------

    def add_kernel(
        self,
        stream: int,
        start: float,
        dur: float,
        name: str = "void synthetic_kernel<float>(float*, int)",
        *,
        launched_by: int | None = None,
        cat: str = "kernel",
        args: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A GPU activity on `stream`; `launched_by` (a correlation from `add_runtime`) links
        it to its launch by `args.correlation` and an `ac2g` flow, as Kineto does."""
        if launched_by is not None and launched_by not in self._launches:
            raise ValueError(f"no runtime event with correlation {launched_by}")
        self._streams.add((self.device, stream))
        launch = self._launches.get(launched_by) if launched_by is not None else None
        if launch is None:
            correlation = self._next_correlation
            self._next_correlation += 1
            external = self._external()
        else:
            correlation, external = launch.correlation, launch.external_id
        event_args: dict[str, Any] = {"External id": external}
        if cat == "kernel":
            event_args.update(
                {
                    "queued": 0,
                    "device": self.device,
                    "context": 1,
                    "stream": stream,
                    "correlation": correlation,
                    "registers per thread": 32,
                    "shared memory": 0,
                    "grid": [128, 1, 1],
                    "block": [256, 1, 1],
                }
            )
        else:
            event_args.update(
                {"device": self.device, "context": 1, "stream": stream, "correlation": correlation}
            )
        event_args.update(args or {})
        start_ns, dur_ns = _ns(start), _ns(dur)
        event = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": self.device,
            "tid": stream,
            "ts": self._file_us(start_ns),
            "dur": self._dur_us(dur_ns),
            "args": event_args,
        }
        self._events.append(event)
        self._gpu.append((self.device, start_ns, start_ns + dur_ns))
        if launch is not None:
            self._events.append(
                {
                    "ph": "s",
                    "id": correlation,
                    "pid": self.pid,
                    "tid": launch.tid,
                    "ts": self._file_us(launch.start_ns),
                    "cat": "ac2g",
                    "name": "ac2g",
                }
            )
            self._events.append(
                {
                    "ph": "f",
                    "id": correlation,
                    "pid": self.device,
                    "tid": stream,
                    "ts": self._file_us(start_ns),
                    "cat": "ac2g",
                    "name": "ac2g",
                    "bp": "e",
                }
            )
        return event

    def add_memcpy(
        self,
        stream: int,
        start: float,
        dur: float,
        *,
        kind: str = "HtoD",
        bytes_: int = 1 << 20,
        launched_by: int | None = None,
    ) -> dict[str, Any]:
        """A `gpu_memcpy` (kind HtoD, DtoH or DtoD)."""
        what = {
            "HtoD": "Memcpy HtoD (Pinned -> Device)",
            "DtoH": "Memcpy DtoH (Device -> Pinned)",
            "DtoD": "Memcpy DtoD (Device -> Device)",
        }[kind]
        bandwidth = bytes_ / max(1, _ns(dur))  # bytes per ns == GB/s
        return self.add_kernel(
            stream,
            start,
            dur,
            what,
            launched_by=launched_by,
            cat="gpu_memcpy",
            args={"bytes": bytes_, "memory bandwidth (GB/s)": bandwidth},
        )

    def add_memset(
        self,
        stream: int,
        start: float,
        dur: float,
        *,
        bytes_: int = 1 << 16,
        launched_by: int | None = None,
    ) -> dict[str, Any]:
        """A `gpu_memset`."""
        bandwidth = bytes_ / max(1, _ns(dur))
        return self.add_kernel(
            stream,
            start,
            dur,
            "Memset (Device)",
            launched_by=launched_by,
            cat="gpu_memset",
            args={"bytes": bytes_, "memory bandwidth (GB/s)": bandwidth},
        )

    def add_stream_sync(self, stream: int, start: float, dur: float, *, synced_by: int) -> None:
        """Kineto's `cuda_sync` record of a stream synchronisation (not GPU work)."""
        launch = self._launches[synced_by]
        self._streams.add((self.device, stream))
        self._events.append(
            {
                "ph": "X",
                "cat": "cuda_sync",
                "name": "Stream Sync",
                "pid": self.device,
                "tid": stream,
                "ts": self.ts(start),
                "dur": self._dur_us(_ns(dur)),
                "args": {
                    "External id": launch.external_id,
                    "cuda_sync_kind": "Stream Sync",
                    "stream": stream,
                    "correlation": launch.correlation,
                    "device": self.device,
                    "context": 1,
                },
            }
        )

    def add_extra(self, key: str, value: Any) -> None:
        """Add a top-level key (written after `traceEvents`)."""
        self._extra[key] = value

    # what was built --------------------------------------------------------------------------

    def idle_gaps(self, device: int | None = None) -> list[Gap]:
        """Holes in the union of the device's GPU activity intervals (dur > 0), in time order."""
        device = self.device if device is None else device
        spans = sorted((s, e) for d, s, e in self._gpu if d == device and e > s)
        gaps: list[Gap] = []
        if not spans:
            return gaps
        busy_end = spans[0][1]
        for start, end in spans[1:]:
            if start > busy_end:
                gaps.append(Gap(busy_end, start))
            busy_end = max(busy_end, end)
        return gaps

    def gap_at(self, t_us: float, device: int | None = None) -> Gap | None:
        """The idle gap containing time `t_us`, if any."""
        for gap in self.idle_gaps(device):
            if gap.contains(t_us):
                return gap
        return None

    def _metadata(self, first_ts: float) -> list[dict[str, Any]]:
        meta: list[dict[str, Any]] = []

        def add(name: str, pid: Any, tid: Any, args: dict[str, Any]) -> None:
            meta.append(
                {"name": name, "ph": "M", "ts": first_ts, "pid": pid, "tid": tid, "args": args}
            )

        add("process_name", self.pid, 0, {"name": self.process_name})
        add("process_labels", self.pid, 0, {"labels": "CPU"})
        add("process_sort_index", self.pid, 0, {"sort_index": self.pid})
        add("process_name", self.device, 0, {"name": self.process_name})
        add("process_labels", self.device, 0, {"labels": f"GPU {self.device}"})
        add("process_sort_index", self.device, 0, {"sort_index": 16777216 + self.device})
        for device, stream in sorted(self._streams):
            add("thread_name", device, stream, {"name": f"stream {stream} "})
            add("thread_sort_index", device, stream, {"sort_index": stream})
        for tid, name in sorted(self._threads.items()):
            add("thread_name", self.pid, tid, {"name": f"thread {tid} ({name})"})
            add("thread_sort_index", self.pid, tid, {"sort_index": tid})
        return meta

    def _gpu_step_annotations(self) -> list[dict[str, Any]]:
        """`gpu_user_annotation` twins of ProfilerStep#N: the span of GPU work launched in it."""
        twins = []
        for event in self._events:
            if event["ph"] != "X" or not event["name"].startswith("ProfilerStep#"):
                continue
            if event["cat"] != "user_annotation":
                continue
            step_start = _ns(event["ts"]) - self._origin_ns
            step_end = step_start + _ns(event["dur"])
            inside = [
                (s, e)
                for gpu_event, (d, s, e) in zip(self._gpu_events(), self._gpu)
                if self._launch_start(gpu_event) is not None
                and step_start <= self._launch_start(gpu_event) < step_end  # type: ignore[operator]
            ]
            if not inside:
                continue
            first = min(s for s, _ in inside)
            last = max(e for _, e in inside)
            twins.append(
                {
                    "ph": "X",
                    "cat": "gpu_user_annotation",
                    "name": event["name"],
                    "pid": self.device,
                    "tid": min(stream for _, stream in self._streams),
                    "ts": self._file_us(first),
                    "dur": self._dur_us(last - first),
                    "args": {"External id": event["args"]["External id"]},
                }
            )
        return twins

    def _gpu_events(self) -> list[dict[str, Any]]:
        return [e for e in self._events if e["ph"] == "X" and e["cat"] in GPU_CATEGORIES]

    def _launch_start(self, gpu_event: dict[str, Any]) -> int | None:
        launch = self._launches.get(gpu_event["args"].get("correlation"))
        return launch.start_ns if launch is not None else None

    def to_dict(self) -> dict[str, Any]:
        """The trace as Kineto lays it out: header, traceEvents, then trailing keys."""
        timed = [e for e in self._events if "ts" in e]
        first_ns = min((_ns(e["ts"]) for e in timed), default=self._origin_ns) - self._origin_ns
        last_ns = (
            max((_ns(e["ts"]) + _ns(e.get("dur", 0)) for e in timed), default=self._origin_ns)
            - self._origin_ns
        )
        first_ts = self._file_us(first_ns)
        events = self._metadata(first_ts) + self._events + self._gpu_step_annotations()
        events.append(
            {
                "ph": "X",
                "cat": "Trace",
                "ts": first_ts,
                "dur": self._dur_us(last_ns - first_ns),
                "pid": "Spans",
                "tid": "PyTorch Profiler",
                "name": "PyTorch Profiler (0)",
                "args": {"Op count": 0},
            }
        )
        events.append(
            {
                "name": "Iteration Start: PyTorch Profiler",
                "ph": "i",
                "s": "g",
                "pid": "Traces",
                "tid": "Trace PyTorch Profiler",
                "ts": first_ts,
            }
        )
        events.append(
            {
                "name": "Record Window End",
                "ph": "i",
                "s": "g",
                "pid": "",
                "tid": "",
                "ts": self._file_us(last_ns + 500_000),
            }
        )
        events.append(
            {
                "name": "process_sort_index",
                "ph": "M",
                "ts": first_ts,
                "pid": "Spans",
                "tid": 0,
                "args": {"sort_index": 536870912},
            }
        )
        document: dict[str, Any] = {
            "schemaVersion": 1,
            "deviceProperties": [
                {
                    "id": self.device,
                    "name": self.device_name,
                    "totalGlobalMem": 85_000_000_000,
                    "computeMajor": 9,
                    "computeMinor": 0,
                    "maxThreadsPerBlock": 1024,
                    "maxThreadsPerMultiprocessor": 2048,
                    "regsPerBlock": 65536,
                    "warpSize": 32,
                    "sharedMemPerBlock": 49152,
                    "numSms": 132,
                    "regsPerMultiprocessor": 65536,
                    "sharedMemPerBlockOptin": 232448,
                    "sharedMemPerMultiprocessor": 233472,
                }
            ],
            "cupti_version": 24,
            "cuda_runtime_version": 12060,
            "cuda_driver_version": 12080,
            "traceEvents": events,
            "traceName": SAMPLE_NAME,
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": self.base_time_ns,
        }
        document.update(self._extra)
        return document

    def write(self, path: str | Path) -> Path:
        """Write the trace as JSON, gzip'd when the name ends in .gz."""
        return write_trace(self.to_dict(), path)


def write_trace(document: dict[str, Any], path: str | Path) -> Path:
    """Write a trace document as JSON (gzip'd when the name ends in .gz, without a timestamp)."""
    path = Path(path)
    data = json.dumps(document, separators=(",", ":")).encode("utf-8")
    if path.name.endswith(".gz"):
        with (
            open(path, "wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as sink,
        ):
            sink.write(data)
    else:
        path.write_bytes(data)
    return path


# the training-run generator ---------------------------------------------------------------

MAIN_STREAM = 7
COPY_STREAM = 13
LAUNCH_LATENCY_US = 4.0  # a kernel starts no earlier than this after its launch call starts


class _Training:
    """Emits a plausible training loop, modelling each stream as a FIFO queue of work."""

    def __init__(self, builder: TraceBuilder, rng: random.Random) -> None:
        self.b = builder
        self.rng = rng
        self.now = 0.0  # the main thread's clock, us since the origin
        self.stream_free = {MAIN_STREAM: 0.0, COPY_STREAM: 0.0}
        self.allocated = 512 << 20
        self.reserved = 1 << 30
        self.worker_tid = builder.add_thread("pt_data_pin", tid=builder.main_tid + 69)

    def jitter(self, low: float, high: float) -> float:
        return round(self.rng.uniform(low, high), 3)

    def cpu(self, name: str, dur: float, *, cat: str = "cpu_op") -> float:
        """A leaf CPU op at `now`; advances the clock."""
        start = self.now
        self.b.add_cpu(name, start, dur, cat=cat)
        self.now = round(start + dur, 3)
        return start

    def launch(
        self,
        op: str,
        kernel: str,
        gpu_dur: float,
        *,
        stream: int = MAIN_STREAM,
        not_before: float = 0.0,
        op_dur: float | None = None,
        runtime: str = "cudaLaunchKernel",
        kind: str = "kernel",
        nbytes: int = 0,
    ) -> tuple[float, float]:
        """An aten op that launches one GPU activity; returns the activity's (start, end)."""
        op_start = self.now
        op_total = op_dur if op_dur is not None else self.jitter(14, 22)
        launch_start = round(op_start + self.jitter(3, 6), 3)
        launch_dur = self.jitter(4, 7)
        # The op encloses its launch call, as in real traces (no draw here: the rest of the
        # random sequence stays as it was).
        op_total = max(op_total, round(launch_start + launch_dur + 1.0 - op_start, 3))
        self.b.add_cpu(op, op_start, op_total)
        correlation = self.b.add_runtime(runtime, launch_start, launch_dur)
        start = round(
            max(launch_start + LAUNCH_LATENCY_US, self.stream_free[stream], not_before), 3
        )
        if kind == "memcpy_h2d":
            self.b.add_memcpy(
                stream, start, gpu_dur, kind="HtoD", bytes_=nbytes, launched_by=correlation
            )
        elif kind == "memcpy_d2h":
            self.b.add_memcpy(
                stream, start, gpu_dur, kind="DtoH", bytes_=nbytes, launched_by=correlation
            )
        elif kind == "memset":
            self.b.add_memset(stream, start, gpu_dur, bytes_=nbytes, launched_by=correlation)
        else:
            self.b.add_kernel(stream, start, gpu_dur, kernel, launched_by=correlation)
        end = round(start + gpu_dur, 3)
        self.stream_free[stream] = end
        self.now = round(op_start + op_total, 3)
        return start, end

    def memory(self, nbytes: int) -> None:
        self.allocated += nbytes
        self.reserved = max(self.reserved, self.allocated + (256 << 20))
        self.b.add_memory(
            self.now,
            nbytes,
            total_allocated=self.allocated,
            total_reserved=self.reserved,
            addr=0x7F3A_0000_0000 + (self.allocated & 0xFFFF_FFFF),
        )

    def gpu_idle_after(self) -> float:
        return max(self.stream_free.values())

    # phases ----------------------------------------------------------------------------------

    def dataloader(self, dur: float) -> tuple[float, float]:
        start = self.now
        self.b.add_dataloader(start, dur)
        # The pin-memory thread collates and pins the batch while the main thread waits.
        work = round(min(dur * 0.6, 300.0), 3)
        worker_start = round(start + dur - work - 10.0, 3)
        self.b.add_cpu("aten::stack", worker_start, round(work * 0.4, 3), tid=self.worker_tid)
        pin_start = round(worker_start + work * 0.4, 3)
        self.b.add_cpu("aten::pin_memory", pin_start, round(work * 0.6, 3), tid=self.worker_tid)
        self.b.add_cpu(
            "aten::_pin_memory",
            round(pin_start + 1, 3),
            round(work * 0.6 - 2, 3),
            tid=self.worker_tid,
        )
        self.now = round(start + dur, 3)
        return start, dur

    def copy_inputs(self) -> float:
        """Host-to-device copy of the batch on the copy stream; returns when it is done."""
        outer = self.now
        _, end = self.launch(
            "aten::copy_",
            "",
            self.jitter(35, 45),
            stream=COPY_STREAM,
            kind="memcpy_h2d",
            nbytes=4 << 20,
            runtime="cudaMemcpyAsync",
            op_dur=self.jitter(18, 24),
        )
        self.b.add_cpu("aten::to", outer, round(self.now - outer + 2, 3))
        self.now = round(self.now + 3, 3)
        self.b.add_runtime("cudaStreamWaitEvent", self.now, 2.0)
        self.now = round(self.now + 4, 3)
        self.memory(4 << 20)
        return end

    def forward(self, inputs_ready: float, layers: int = 4) -> None:
        outer = self.now
        self.now = round(self.now + 2, 3)
        for layer in range(layers):
            linear = self.now
            self.now = round(self.now + 3, 3)
            self.launch(
                "aten::addmm",
                "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1",
                self.jitter(150, 190),
                # The first layer waits (cudaStreamWaitEvent) for the copy stream; the event
                # takes a few us to release the main stream, a short kernel_wait gap when idle.
                not_before=round(inputs_ready + 2.5, 3) if layer == 0 else 0.0,
            )
            self.b.add_cpu("aten::linear", linear, round(self.now - linear + 2, 3))
            self.now = round(self.now + 3, 3)
            self.memory(2 << 20)
            self.launch(
                "aten::relu",
                "void at::native::vectorized_elementwise_kernel<4, "
                "at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, "
                "c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}"
                "::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, "
                "std::array<char*, 2ul> >(int, "
                "at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, "
                "c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}"
                "::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, "
                "std::array<char*, 2ul>)",
                self.jitter(10, 14),
            )
        loss = self.now
        self.now = round(self.now + 2, 3)
        self.launch(
            "aten::_log_softmax",
            "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
            "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, "
            "int)",
            self.jitter(8, 12),
        )
        self.launch(
            "aten::nll_loss_forward",
            "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, "
            "float, long>(float*, float*, float const*, long const*, float const*, bool, long, "
            "long, long, long)",
            self.jitter(6, 9),
        )
        self.b.add_cpu("aten::cross_entropy_loss", loss, round(self.now - loss + 1, 3))
        self.now = round(self.now + 2, 3)
        self.b.add_annotation("## forward ##", outer, round(self.now - outer, 3))

    def item_sync(self) -> tuple[float, float]:
        """`loss.item()`: a 4-byte DtoH copy, then the CPU blocks until the GPU catches up.

        Returns the (start, dur) of the cudaStreamSynchronize call."""
        item = self.now
        self.now = round(self.now + 2, 3)
        dense = self.now
        self.now = round(self.now + 2, 3)
        _, copied = self.launch(
            "aten::copy_",
            "",
            2.1,
            kind="memcpy_d2h",
            nbytes=4,
            runtime="cudaMemcpyAsync",
            op_dur=self.jitter(8, 10),
        )
        sync_start = self.now
        sync_end = round(max(copied, sync_start) + 3.5, 3)
        correlation = self.b.add_runtime("cudaStreamSynchronize", sync_start, sync_end - sync_start)
        self.b.add_stream_sync(
            MAIN_STREAM, sync_start, round(copied - sync_start, 3), synced_by=correlation
        )
        self.now = round(sync_end + 1, 3)
        self.b.add_cpu("aten::_local_scalar_dense", dense, round(self.now - dense, 3))
        self.now = round(self.now + 1, 3)
        self.b.add_cpu("aten::item", item, round(self.now - item, 3))
        return sync_start, round(sync_end - sync_start, 3)

    def backward(self, layers: int = 4) -> None:
        outer = self.now
        self.now = round(self.now + 3, 3)
        for layer in range(layers):
            node = self.now
            self.now = round(self.now + 4, 3)
            self.launch(
                "aten::mm",
                "sm90_xmma_gemm_f32f32_tf32f32_f32_nt_n_tilesize64x128x32_warpgroupsize1x1x1",
                self.jitter(140, 180),
            )
            if layer == 1:
                # Weight-gradient reduction on the side stream overlaps the main stream's work.
                self.launch(
                    "aten::sum",
                    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
                    "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, "
                    "float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
                    "unsigned int, float, 4> >(at::native::ReduceOp<float, "
                    "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, "
                    "float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
                    "unsigned int, float, 4>)",
                    self.jitter(60, 80),
                    stream=COPY_STREAM,
                )
            self.launch(
                "aten::mm",
                "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x64x32_warpgroupsize1x1x1",
                self.jitter(140, 180),
            )
            self.b.add_cpu(
                f"autograd::engine::evaluate_function: AddmmBackward{layer}",
                node,
                round(self.now - node + 2, 3),
            )
            self.now = round(self.now + 3, 3)
        self.memory(-(6 << 20))
        self.b.add_annotation("## backward ##", outer, round(self.now - outer, 3))

    def optimizer_step(self) -> None:
        outer = self.now
        self.now = round(self.now + 4, 3)
        zero = self.now
        self.now = round(self.now + 2, 3)
        self.launch(
            "aten::zero_",
            "",
            self.jitter(3, 4),
            kind="memset",
            nbytes=1 << 16,
            runtime="cudaMemsetAsync",
        )
        self.b.add_cpu("aten::fill_", zero, round(self.now - zero + 1, 3))
        self.now = round(self.now + 2, 3)
        for kernel in ("_foreach_mul_", "_foreach_add_", "_foreach_add_"):
            self.launch(
                f"aten::{kernel}",
                "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<"
                "at::native::(anonymous namespace)::TensorListMetadata<2>, "
                "at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, "
                "std::plus<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<2>, "
                "at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, "
                "std::plus<float>, float)",
                self.jitter(20, 30),
            )
        self.b.add_annotation("Optimizer.step#SGD.step", outer, round(self.now - outer, 3))
        self.memory(-(4 << 20))

    def launch_bound_stretch(self, kernels: int) -> tuple[float, float]:
        """A per-parameter Python loop (an EMA update) after a device sync: many tiny kernels,
        each launched after the previous one finished. Returns the stretch's GPU (start, end)."""
        # The sync call lasts until the GPU has drained its queue.
        sync_dur = round(max(self.gpu_idle_after() - self.now, 0.0) + 3.0, 3)
        self.b.add_runtime("cudaDeviceSynchronize", self.now, sync_dur)
        self.now = round(self.now + sync_dur + 1, 3)
        outer = self.now
        self.now = round(self.now + 2, 3)
        first = last = 0.0
        for index in range(kernels):
            start, end = self.launch(
                "aten::add_" if index % 2 else "aten::mul_",
                "void at::native::vectorized_elementwise_kernel<4, "
                "at::native::AUnaryFunctor<float, float, float, "
                "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >"
                "(int, at::native::AUnaryFunctor<float, float, float, "
                "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul>)",
                self.jitter(1.8, 2.4),
                op_dur=self.jitter(9, 11),
            )
            if index == 0:
                first = start
            last = end
            self.now = round(self.now + self.jitter(1, 2), 3)
        self.b.add_annotation("ema_update", outer, round(self.now - outer, 3))
        return first, last


def build_training_trace(seed: int = 0, steps: int = 4, *, first_step: int = 10) -> dict:
    """A synthetic GPU training trace as a dict (the content of a .pt.trace.json file).

    Steps cycle through four kinds: normal, DataLoader stall, sync stall, launch-bound
    (`steps=4` gives one of each), numbered `ProfilerStep#first_step` on. The top-level key
    `kinetoscopeSynthetic` lists each stall's CPU interval and the GPU idle gap it caused, in
    the file's time base (microseconds, like `ts`).
    """
    if steps < 1:
        raise ValueError("steps must be 1 or more")
    rng = random.Random(seed)
    builder = TraceBuilder()
    run = _Training(builder, rng)
    stalls: list[dict[str, Any]] = []
    run.now = 100.0
    for index in range(steps):
        number = first_step + index
        kind = ("normal", "dataloader", "sync", "launch_bound")[index % 4]
        step_start = run.now
        if kind == "dataloader":
            loader_start, loader_dur = run.dataloader(round(6000 + rng.uniform(0, 500), 3))
        else:
            # A prefetched batch: the wait is short next to the step (under 10% of it).
            loader_start, loader_dur = run.dataloader(run.jitter(20, 40))
        inputs_ready = run.copy_inputs()
        run.forward(inputs_ready)
        sync = None
        if kind == "sync":
            sync = run.item_sync()
            # The loss is logged on the host before backward can be launched.
            run.b.add_annotation("log_metrics", run.now, 900.0)
            run.now = round(run.now + 900.0, 3)
        run.backward()
        run.optimizer_step()
        stretch = None
        if kind == "launch_bound":
            stretch = run.launch_bound_stretch(kernels=40)
        run.now = round(run.now + 5, 3)
        builder.add_step(number, step_start, round(run.now - step_start, 3))
        step_name = f"ProfilerStep#{number}"
        if kind == "dataloader":
            gap = builder.gap_at(loader_start + loader_dur / 2)
            stalls.append(_stall("dataloader", step_name, builder, loader_start, loader_dur, gap))
        elif kind == "sync" and sync is not None:
            gap = builder.gap_at(sync[0] + sync[1] + 450.0)
            stalls.append(_stall("sync", step_name, builder, sync[0], sync[1], gap))
        elif kind == "launch_bound" and stretch is not None:
            inner = [
                g
                for g in builder.idle_gaps()
                if stretch[0] <= g.start and g.end_ns <= _ns(stretch[1])
            ]
            stalls.append(
                {
                    "kind": "launch_bound",
                    "step": step_name,
                    "gpu_start_us": builder.ts(stretch[0]),
                    "gpu_dur_us": round(stretch[1] - stretch[0], 3),
                    "kernels": 40,
                    "idle_gaps": len(inner),
                    "max_gap_us": max((g.dur for g in inner), default=0.0),
                }
            )
    builder.add_extra(
        "kinetoscopeSynthetic",
        {
            "generator": GENERATOR,
            "note": "synthetic trace: generated, not captured from a real workload",
            "seed": seed,
            "steps": steps,
            "stalls": stalls,
        },
    )
    return builder.to_dict()


def _stall(
    kind: str, step: str, builder: TraceBuilder, cpu_start: float, cpu_dur: float, gap: Gap | None
) -> dict[str, Any]:
    return {
        "kind": kind,
        "step": step,
        "cpu_start_us": builder.ts(cpu_start),
        "cpu_dur_us": round(cpu_dur, 3),
        "gpu_idle_start_us": builder.ts(gap.start) if gap else None,
        "gpu_idle_dur_us": round(gap.dur, 3) if gap else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kinetoscope.capture.synthetic",
        description="Write a synthetic GPU training trace (no torch or GPU needed).",
    )
    parser.add_argument("output", type=Path, help=f"e.g. sample_traces/{SAMPLE_NAME}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args(argv)
    write_trace(build_training_trace(seed=args.seed, steps=args.steps), args.output)
    print(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
