"""`TraceSession`: one opened trace and everything derived from it, each computed once.

Every view, the summary and every feature that holds several traces (ranks, a diff) goes
through a session: it is the single owner of the trace's derived data. No other object keeps
a copy or stores results on the trace.

Thread-safety rule (tested in tests/test_session.py):
- Any thread may ask for any result at any time.
- Each result is computed at most once, by the first thread that asks, under a lock of its
  own; a thread asking for a result that is being computed waits for it. Results that depend
  on each other take their locks in dependency order (there are no cycles), so two threads can
  never wait on each other.
- A result is never changed once made; callers must not change the arrays they are given.
- A computation that raises is remembered: every later ask raises `AnalysisFailed` naming the
  result and the original error, so a failure is reported where it is needed, never retried in
  a loop and never half-stored.

The nesting is staged on purpose: the timeline's first frame needs only each lane's top level,
which `view layout` code finds with one sort, while nesting every slice takes longer on big
traces. `nesting_ready` says whether the nesting exists yet (without computing it);
`nesting` computes it or waits for it; `provide_nesting` installs one that was read from the
view cache instead of computed. Whatever asks for the nesting gets the same object.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import numpy as np
from kinetoscope.parser.model import Trace

from .classify import Groups, RowClasses, classify, group_rows
from .idle import IdleAnalysis, IdleByCpu, compute_idle, compute_idle_by_cpu
from .kernels import KernelTable, compute_kernels, main_launchers
from .links import Links, compute_links
from .memory import MemoryGroup, compute_memory
from .nesting import Nesting, compute_nesting
from .operators import OperatorInstance, OperatorTable, compute_operators, operator_instance
from .steps import Steps, compute_steps, step_rows

if TYPE_CHECKING:
    from .compile import CompileAnalysis, Efficiency
    from .finding import Finding
    from .memory_ops import MemoryOps
    from .sync import SyncCalls

T = TypeVar("T")

# From this many rows (a trace of about 2 GB), `compute_concurrently` gives the heap its stages
# freed back after each one. Measured on the owlv2 traces (benchmarks/run.py's cold summary):
# at 4 GB the peak fell by about 50 MB at no visible cost in time; at 1 GB (2.9 M rows) by 6 MB,
# for 0.15-0.2 s more (the pages given back are faulted in again by the next stages).
TRIM_ROWS = 6_000_000


class AnalysisFailed(Exception):
    """A derived result could not be computed; `name` says which, `__cause__` why."""

    def __init__(self, name: str, error: BaseException) -> None:
        super().__init__(f"{name.replace('_', ' ')}: {type(error).__name__}: {error}")
        self.name = name
        self.error = error


def memory_failure(error: BaseException) -> str | None:
    """Whether `error` is running out of memory: a MemoryError, or an AnalysisFailed caused by
    one (nested any deep: a result built on one that failed). Then the stage that ran out, as
    words, innermost first (`nesting (for idle by cpu)`; `""` for a bare MemoryError); None
    for any other error."""
    stages: list[str] = []
    while isinstance(error, AnalysisFailed) and len(stages) < 64:
        stages.append(error.name.replace("_", " "))
        error = error.error
    if not isinstance(error, MemoryError):
        return None
    if not stages:
        return ""
    inner, outer = stages[-1], stages[:-1]
    return inner + (f" (for {', '.join(reversed(outer))})" if outer else "")


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class _Failure:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class derived(Generic[T]):
    """A session attribute computed once on first use, under its own lock (see the module's
    thread-safety rule). Results live in the session's `_results`, never in `__dict__`."""

    def __init__(self, make: Callable[[Any], T]) -> None:
        self.make = make
        self.name = make.__name__
        self.__doc__ = make.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, session: None, owner: type) -> derived[T]: ...
    @overload
    def __get__(self, session: TraceSession, owner: type) -> T: ...
    def __get__(self, session: TraceSession | None, owner: type) -> Any:
        if session is None:
            return self
        return session._result(self.name, lambda: self.make(session))


class TraceSession:
    """One opened trace and its derived results (see the module docstring for the rules)."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self._results: dict[str, Any] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()  # only around `_locks` itself

    # -- the machinery ----------------------------------------------------------------------

    def _lock_for(self, name: str) -> threading.Lock:
        with self._guard:
            lock = self._locks.get(name)
            if lock is None:
                lock = self._locks[name] = threading.Lock()
            return lock

    def _result(self, name: str, make: Callable[[], T]) -> T:
        value = self._results.get(name, _MISSING)
        if value is _MISSING:
            with self._lock_for(name):
                value = self._results.get(name, _MISSING)
                if value is _MISSING:
                    try:
                        value = make()
                    except Exception as error:  # remembered: later asks say the same
                        value = _Failure(error)
                    self._results[name] = value
        if isinstance(value, _Failure):
            raise AnalysisFailed(name, value.error) from value.error
        return value

    def has(self, name: str) -> bool:
        """Whether the result `name` is computed (successfully) already; never computes it."""
        value = self._results.get(name, _MISSING)
        return value is not _MISSING and not isinstance(value, _Failure)

    def failure(self, name: str) -> BaseException | None:
        """The error that computing `name` raised, if it was tried and failed."""
        value = self._results.get(name)
        return value.error if isinstance(value, _Failure) else None

    def compute_concurrently(self, *plans: tuple[str, ...]) -> None:
        """Compute results ahead of their use, each plan's in order, the first plan on this
        thread and each other on a thread of its own (numpy releases the interpreter's lock in
        the sorts and searches most stages spend their time in, so a second core helps). A
        result a plan needs from another's is waited for under its lock, as for any ask; a
        failure is remembered as usual and raised where the result is asked for. With one CPU,
        or one plan, everything runs here in order. Returns when every plan is done."""
        from kinetoscope.parser import threads_affordable

        if len(plans) > 1 and _cpus() > 1 and threads_affordable():
            threads = [
                threading.Thread(target=self._compute, args=(plan,), daemon=True)
                for plan in plans[1:]
            ]
            started = []
            for thread in threads:
                try:
                    thread.start()
                except RuntimeError:  # no thread to be had (an address-space limit): run here
                    break
                started.append(thread)
            try:
                self._compute(plans[0])
                for plan in plans[1 + len(started) :]:
                    self._compute(plan)
            finally:
                for thread in started:
                    thread.join()
        else:
            for plan in plans:
                self._compute(plan)

    def _compute(self, plan: tuple[str, ...]) -> None:
        # On a big trace every stage leaves tens to hundreds of MB of freed temporaries in the
        # heap, which glibc keeps (a 4 GB trace's analysis ended some 220 MB above its live
        # data), much of it in the other thread's arena, where this thread's next stage cannot
        # reuse it: given back after each stage (a few ms each), it no longer counts beside
        # the next stages' peaks.
        trim = len(self.trace) >= TRIM_ROWS
        if trim:
            from kinetoscope.parser import release_heap
        for name in plan:
            try:
                getattr(self, name)
            except AnalysisFailed:
                pass  # remembered: raised again where the result is used
            if trim:
                release_heap()

    # -- staged nesting ---------------------------------------------------------------------

    @property
    def nesting_ready(self) -> bool:
        """The CPU nesting exists (computed or provided); asking for it will not wait."""
        return self.has("nesting")

    def provide_nesting(self, nesting: Nesting) -> Nesting:
        """Install a nesting read from the view cache, unless one is there already; returns the
        session's nesting (the one given, or the one that was there)."""
        return self._result("nesting", lambda: nesting)

    # -- derived results --------------------------------------------------------------------

    @derived
    def classes(self) -> RowClasses:
        return classify(self.trace)

    @derived
    def cpu_groups(self) -> Groups:
        return group_rows(self.trace, self.classes.cpu)

    @derived
    def gpu_groups(self) -> Groups:
        return group_rows(self.trace, self.classes.gpu)

    @derived
    def nesting(self) -> Nesting:
        """Every CPU slice's parent and depth: the slow stage (see `nesting_ready`)."""
        return compute_nesting(self.trace, self.classes.cpu, self.cpu_groups.index)

    @derived
    def links(self) -> Links:
        return compute_links(self.trace, self.classes.gpu, self.classes.runtime)

    @derived
    def operators(self) -> OperatorTable:
        return compute_operators(self.trace, self.nesting, self.cpu_groups, self.links)

    @derived
    def kernels(self) -> KernelTable:
        return compute_kernels(self.trace, self.gpu_groups, self.links, self.nesting)

    @derived
    def kernel_launchers(self) -> np.ndarray:
        """Per kernel group: the operator group that launched most of its GPU time, or -1."""
        return main_launchers(self.trace, self.kernels, self.links, self.cpu_groups)

    @derived
    def idle(self) -> IdleAnalysis:
        return compute_idle(self.trace, self.classes.kind, self.links)

    @derived
    def idle_by_cpu(self) -> IdleByCpu:
        """What the CPU was doing during each idle gap, over all gaps."""
        return compute_idle_by_cpu(self.trace, self.nesting, self.links, self.idle.gaps)

    @derived
    def steps(self) -> Steps:
        c = self.classes
        # The nesting, when there already (as in the summary), gives each thread's CPU slices in
        # time order: the steps' per-thread unions need no sort then. The same result either way.
        nesting = None
        if self.nesting_ready:
            try:
                nesting = self.nesting
            except AnalysisFailed:
                nesting = None
        return compute_steps(self.trace, c.cpu, c.gpu, c.kind, c.runtime, nesting)

    @derived
    def memory(self) -> list[MemoryGroup]:
        return compute_memory(self.trace.memory)

    @derived
    def memory_ops(self) -> MemoryOps:
        """Allocations and frees attributed to operators."""
        from .memory_ops import compute_memory_ops

        return compute_memory_ops(
            self.trace, self.nesting, self.cpu_groups, step_rows(self.trace, self.classes.cpu)
        )

    @derived
    def sync(self) -> SyncCalls:
        """The host calls that block on the GPU."""
        from .sync import compute_sync

        return compute_sync(self.trace, self.classes, self.nesting, self.links, self.idle.gaps)

    @derived
    def compiled(self) -> CompileAnalysis:
        """The compile and graph-replay lens (analysis/compile.py)."""
        from .compile import compute_compile

        return compute_compile(self)

    @derived
    def kernel_efficiency(self) -> Efficiency:
        """Achieved TFLOP/s and GB/s where kernels carry kernel_flop / kernel_num_gb; reads
        those args back from the file (slow on big .gz files: ask off the UI thread)."""
        from .compile import compute_efficiency

        return compute_efficiency(self)

    @derived
    def findings(self) -> list[Finding]:
        from .rules import run_rules

        return run_rules(self)

    @derived
    def causes(self) -> list[Finding]:
        """The findings grouped one per cause (rules.group_findings), most severe first."""
        from .rules import group_findings

        return group_findings(self.findings)

    # -- queries for the viewer -------------------------------------------------------------

    def runtime_of(self, gpu_row: int) -> int:
        """The runtime call that launched a GPU activity, or -1."""
        return self.links.runtime_of(gpu_row)

    def gpu_of(self, runtime_row: int) -> np.ndarray:
        """The GPU activities a runtime call launched."""
        return self.links.gpu_of(runtime_row)

    def instance(self, row: int) -> OperatorInstance:
        """Self time, children, launched GPU work and input shapes of one CPU slice."""
        return operator_instance(self.trace, self.nesting, self.links, row)

    def gap_cpu_stack(self, gap: int) -> np.ndarray:
        """Rows of the CPU slices on the launching call's lane that contain the gap's midpoint,
        outermost first; empty when the gap's next GPU event has no linked runtime call."""
        gaps = self.idle.gaps
        runtime = int(gaps.runtime_row[gap])
        if runtime < 0:
            return np.zeros(0, np.int64)
        lane = int(self.trace.lane[runtime])
        return self.nesting.slices_at(self.trace, lane, gaps.midpoint(gap))


_MISSING: Any = object()
