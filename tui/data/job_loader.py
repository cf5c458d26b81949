"""Loading a distributed job for the viewer: its files found, every rank digested in worker
processes (`map_ranks`, as `summary DIR` does), then the ranks merged (`analyze_job`).

`JobLoad(inputs, ...)` finds the job's files at once (a folder, or several files; a `JobError`
becomes `error`) and starts a thread that digests the ranks and merges them. It reports to one
sink the UI subscribes (`subscribe`, reporter.py), replaying what a late subscriber missed, in order:
`RankDone` per rank as its digest arrives, then `JobDone` (the merged `JobAnalysis`) or
`JobFailed` (one line); `cancel()` (the viewer closing) abandons the digests not arrived
without waiting for them. A rank whose file is damaged or missing does not fail the job: its
digest says why, and the views show it. No rank's full model is loaded here: the viewer
loads one (tui/data/loader.py:TraceLoad) when the user opens that rank.

This module does not import Textual.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .reporter import Reporter

if TYPE_CHECKING:
    from kinetoscope.analysis.job import JobAnalysis, RankDigest
    from kinetoscope.parser.ranks import JobFiles


@dataclass(frozen=True)
class RankDone:
    """Rank file `index` (of `files.files`) is digested (maybe with an error)."""

    index: int
    digest: RankDigest


@dataclass(frozen=True)
class JobDone:
    """Every rank is digested and the job merged."""

    job: JobAnalysis


@dataclass(frozen=True)
class JobFailed:
    """No job can be shown; a one-line message."""

    message: str


JobReport = RankDone | JobDone | JobFailed
JobSink = Callable[[JobReport], None]


class JobLoad(Reporter[JobReport]):
    """One job being loaded (see the module docstring). `files`, `digests`, `job` and `error`
    may be read from any thread."""

    def __init__(
        self,
        inputs: list[str],
        *,
        cycle: int | None = None,
        workers: int | None = None,
        align_clocks: bool = False,
        executor: Any = None,
        start: bool = True,
    ) -> None:
        from kinetoscope.parser.ranks import JobError, discover

        self.inputs = list(inputs)
        self.workers = workers
        self.executor = executor
        self.align_clocks = align_clocks
        self.files: JobFiles | None = None
        self.digests: list[RankDigest | None] = []
        self.job: JobAnalysis | None = None
        self.error: str | None = None
        self._init_reports()
        self._thread: threading.Thread | None = None
        self._cancel = threading.Event()
        self._local_pool = False  # digested by worker processes of this program's own
        try:
            self.files = discover(self.inputs, cycle=cycle)
        except JobError as exc:
            self._fail(str(exc))
            return
        except OSError as exc:
            self._fail(f"cannot read the job's files: {exc.strerror or exc}")
            return
        self.digests = [None] * len(self.files.files)
        if start:
            self.start()

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.files.files] if self.files is not None else []

    def start(self) -> None:
        """Start digesting (the constructor does, unless told not to)."""
        if self._thread is not None or self.files is None:
            return
        self._prepare_pool()
        self._thread = threading.Thread(target=self._run, name="kinetoscope-job", daemon=True)
        self._thread.start()

    def _prepare_pool(self) -> None:
        """Start the worker processes' server now, before a terminal UI takes over the
        standard streams (which the server is started with), when a local pool will be used."""
        from kinetoscope.analysis.job import default_workers

        paths = self.paths
        if self.executor is not None or len(paths) <= 1:
            return
        if (self.workers or default_workers(len(paths))) <= 1:
            return
        from kinetoscope.parser import pays_for_workers

        if self.workers is None and not pays_for_workers(list(paths)):
            return  # tiny ranks: map_ranks digests them in this process
        self._local_pool = True
        try:
            from multiprocessing import forkserver

            from kinetoscope.analysis.job import worker_context

            worker_context()
            forkserver.ensure_running()
        except (OSError, ValueError):
            pass  # map_ranks starts it itself, or says why it could not

    # -- what the UI calls ----------------------------------------------------------------------

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout)

    def cancel(self, wait: float = 1.0) -> None:
        """Abandon the digests not arrived yet (the viewer is closing): pending ones are
        cancelled and the local pool's worker processes ended, so that quitting does not wait
        for them; nothing more is reported. Waits up to `wait` seconds for the workers to be
        ended (a digest in this process's own thread is not waited for: the thread goes with
        the process)."""
        self._cancel.set()
        self.unsubscribe()
        if self._local_pool:
            self.join(wait)

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    @property
    def running(self) -> bool:
        """The ranks are being digested or merged."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def done(self) -> int:
        """Ranks digested so far."""
        return sum(1 for d in self.digests if d is not None)

    def reanalyze(self, align_clocks: bool, force: bool = False) -> JobAnalysis:
        """The job merged again from the same digests (e.g. with the clocks aligned; `force`:
        even when the ranks ran on one host)."""
        from kinetoscope.analysis.job import analyze_job

        assert self.files is not None and all(d is not None for d in self.digests)
        self.align_clocks = align_clocks
        self.job = analyze_job(
            list(self.digests),  # type: ignore[arg-type]
            self.files,
            align_clocks=align_clocks,
            force_align=force and align_clocks,
        )
        return self.job

    # -- reporting ------------------------------------------------------------------------------

    def _report(self, report: JobReport) -> None:
        self._send(report)

    def _fail(self, message: str) -> None:
        self.error = message
        self._report(JobFailed(message))

    def _run(self) -> None:
        from kinetoscope.analysis.job import DigestsCancelled, analyze_job, map_ranks

        def arrived(index: int, digest: RankDigest) -> None:
            self.digests[index] = digest
            self._report(RankDone(index, digest))

        try:
            digests = map_ranks(
                self.paths,
                executor=self.executor,
                workers=self.workers,
                on_done=arrived,
                cancel=self._cancel,
            )
            assert self.files is not None
            job = analyze_job(digests, self.files, align_clocks=self.align_clocks)
        except DigestsCancelled:
            return  # no one is listening any more
        except Exception as exc:  # the views say it; the viewer stays up
            self._fail(f"the job could not be analysed ({type(exc).__name__}: {exc})")
            return
        self.job = job
        self._report(JobDone(job))
