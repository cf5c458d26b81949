"""Where the summary's analysis sets its peak of memory: the two-thread analysis of `summary`
on one trace, with every stage's start and end per thread, the resident memory sampled every
2 ms, and what each thread was running at the highest sample.

    python benchmarks/bench_peak.py TRACE [--trim]

The trace is loaded as the summary loads it (no model cache), the worker server is waited for
(its pool is stopped in a thread: waited for), then `build_summary` runs with each stage of its plans
timed (`TraceSession._compute`, the loop that runs a plan, called one stage at a time: it adds
nothing but the timing). Printed: the resident memory after the load and at the peak, the stages
(thread, name, start and end in seconds from the start of the analysis; those running at the
peak marked), the Python stacks of both threads at the peak, and a coarse timeline of the
resident memory (MiB). The sampler takes the stacks only when a new highest sample is seen, so
its own cost is small; the process tree's peak that benchmarks/run.py samples every 20 ms can
miss a short spike this sees. `--trim` also gives freed heap back after every stage, whatever
the trace's size (the session does it from TRIM_ROWS rows).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import traceback

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mib() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * PAGE >> 20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--trim", action="store_true", help="give freed heap back after each stage")
    args = parser.parse_args()

    import kinetoscope.analysis.compile  # noqa: F401  (imported before the timing)
    import kinetoscope.analysis.memory_ops  # noqa: F401
    from kinetoscope.analysis import TraceSession
    from kinetoscope.analysis import session as session_module
    from kinetoscope.analysis.summary import build_summary
    from kinetoscope.parser import load, releasing

    from kinetoscope.present.report_summary import summary_json

    trace = load(args.trace, use_cache=False, write_cache=False, release=True)
    while releasing():  # the load's pool is stopped in a thread: wait for it
        time.sleep(0.01)
    base = rss_mib()

    log: list[tuple[str, str, float, float]] = []
    run_plan = TraceSession._compute

    def timed(self: TraceSession, plan: tuple[str, ...]) -> None:
        for name in plan:  # the session's own loop, one stage at a time
            began = time.perf_counter()
            run_plan(self, (name,))
            log.append((threading.current_thread().name, name, began, time.perf_counter()))

    TraceSession._compute = timed  # type: ignore[method-assign]
    if args.trim:
        session_module.TRIM_ROWS = 0

    samples: list[tuple[float, int]] = []
    highest = [0, 0.0, []]
    done = threading.Event()

    def sample() -> None:
        me = threading.get_ident()
        while not done.is_set():
            now, rss = time.perf_counter(), rss_mib()
            samples.append((now, rss))
            if rss > highest[0]:
                frames = sys._current_frames()
                stacks = [
                    "".join(traceback.format_stack(frame)[-5:])
                    for ident, frame in frames.items()
                    if ident != me
                ]
                highest[:] = [rss, now, stacks]
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    time.sleep(0.05)
    began = time.perf_counter()
    summary_json(build_summary(TraceSession(trace)))
    done.set()
    sampler.join()

    peak, at, stacks = highest
    print(f"after the load: {base} MiB; peak {peak} MiB at {at - began:.3f} s")
    for thread, name, start, end in log:
        if end - start >= 0.005:
            running = start <= at <= end
            print(
                f"  {thread[:10]:10s} {name:18s} {start - began:7.3f} {end - began:7.3f}"
                + ("  <- at the peak" if running else "")
            )
    print("stacks at the peak:")
    for stack in stacks:
        print(stack)
    step = max(1, len(samples) // 40)
    print("memory (s:MiB): " + " ".join(f"{t - began:.2f}:{r}" for t, r in samples[::step]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
