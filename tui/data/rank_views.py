"""The one owner of a job's ranks' view data in the job viewer: rank -> `ViewData`, each loaded
through a `TraceLoad` (loader.py), the resident ranks bounded, the others forgotten.

The job viewer (tui/job/job_app.py) and the job's timeline (tui/job/job_timeline.py) both ask
`RankViews` for a rank and never load one themselves, so a rank the timeline drew opens alone
without a second load, and the other way round. Two ways to ask:

- `open(rank)`: the user opens the rank alone and waits: its full load starts at once, with
  progress, laid out staged or not as the viewer is (`staged`), nested after its first frame.
- `want(rank)`: the job's timeline is about to draw the rank: a background load, `LOAD_THREADS`
  at a time in the order asked, laid out with its lanes' top levels only (`nest=False`: the
  collapsed rows need no more), in this process (`workers=1`). The rank is then held: the
  timeline draws it. `nest(rank, data)` places the rest when such a rank is opened alone.

Bounds: past `RESIDENT_RANKS` views of held ranks, `trim(candidates)` forgets the candidates the
timeline names (the ranks farthest off screen first); of the ranks not held (opened alone, or
left by a closed timeline), the `RANK_VIEWS_KEPT` used last are kept, for a quick reopen.

Reports go to whoever asked for that rank: `open`, `want` and `nest` take the asker (any object,
e.g. a screen) and its sink, called with each report of the rank's load (loader.py's `Progress`,
`Ready`, `Complete`, `Failed`, `Cancelled`, `BackgroundFailure`, `Reloading`) from the loading
thread; `forget_asker` stops them. This module does not import Textual.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .loader import BackgroundFailure, Cancelled, Complete, Failed, Ready, Report, Stage, TraceLoad
from .viewdata import ViewData

LOAD_THREADS = 2  # background loads (the job's timeline) at once
# Views of held ranks (those the job's timeline draws) kept: past this, those the timeline
# names go (loaded again when wanted again), so that scrolling through a big job does not hold
# every rank's model.
RESIDENT_RANKS = 32
RANK_VIEWS_KEPT = 2  # views of ranks not held kept (the ones used last), for a quick reopen

Sink = Callable[[Report], None]


class RankViews:
    """rank -> view data of a job's ranks (see the module docstring); `paths`: each rank's
    trace file. Every method may be called from any thread."""

    def __init__(self, paths: Mapping[int, str]) -> None:
        self.paths = dict(paths)
        self._lock = threading.RLock()
        self._loads: dict[int, TraceLoad] = {}  # each rank's load: its view, or on its way
        self._used: list[int] = []  # ranks with a view, the one used last at the end
        self._queue: list[int] = []  # background loads waiting for a slot, in the order asked
        self._reading: set[int] = set()  # background loads started and not yet ended
        self._held: set[int] = set()  # ranks a screen draws (the job's timeline)
        self._sinks: dict[int, dict[int, tuple[Any, Sink]]] = {}  # rank -> id(asker) -> sink
        self._nesting: set[int] = set()  # id() of the views being nested by `nest`

    # -- what the viewers ask -------------------------------------------------------------------

    def view(self, rank: int) -> ViewData | None:
        """The rank's view data, if it is loaded (it counts as used now)."""
        with self._lock:
            load = self._loads.get(rank)
            data = load.data if load is not None else None
            if data is not None:
                self._touch(rank)
            return data

    def error(self, rank: int) -> str | None:
        """Why the rank's last load failed, if it did."""
        with self._lock:
            load = self._loads.get(rank)
            return load.error if load is not None and load.stage is Stage.FAILED else None

    def loading(self, rank: int) -> bool:
        """The rank's view is on its way (or waits for a slot)."""
        with self._lock:
            if rank in self._queue:
                return True
            load = self._loads.get(rank)
            return load is not None and load.stage in (Stage.READING, Stage.LAYOUT)

    @property
    def resident(self) -> list[int]:
        """The ranks whose view is kept, the one used last at the end."""
        with self._lock:
            return [r for r in self._used if self._has_view(r)]

    @property
    def busy(self) -> bool:
        """A load is still at work (reading, or writing its cache after the view), or waits."""
        with self._lock:
            return bool(self._queue) or any(load.running for load in self._loads.values())

    @property
    def held(self) -> set[int]:
        with self._lock:
            return set(self._held)

    def open(self, rank: int, asker: Any, sink: Sink, *, staged: bool) -> TraceLoad:
        """The rank's load for the user, who waits for it: the one on its way (or done), else
        a full load started now. `sink` gets its reports from now on."""
        with self._lock:
            self._listen(rank, asker, sink)
            load = self._loads.get(rank)
            if load is not None and load.stage not in (Stage.FAILED, Stage.CANCELLED):
                return load
            if rank in self._queue:  # waiting in the background: the user comes first
                self._queue.remove(rank)
            self._reading.discard(rank)
            return self._start(rank, TraceLoad(self.paths[rank], staged=staged))

    def want(self, rank: int, asker: Any, sink: Sink) -> None:
        """Load the rank in the background (once; see the module docstring) and hold it: a
        screen is about to draw it. `sink` gets its reports from now on."""
        with self._lock:
            if rank not in self.paths:
                return
            self._listen(rank, asker, sink)
            self._held.add(rank)
            load = self._loads.get(rank)
            if load is None and rank not in self._queue:
                self._queue.append(rank)
        self._start_queued()

    def first_frame_shown(self, rank: int) -> None:
        """The rank's first frame is drawn: its load's later work may start."""
        with self._lock:
            load = self._loads.get(rank)
        if load is not None:
            load.first_frame_shown()

    def nest(self, rank: int, data: ViewData, asker: Any, sink: Sink) -> None:
        """Place every slice of `data` (the rank's view, laid out with its top levels only) in
        a thread; `Complete(data)` follows (or a `BackgroundFailure`). Nothing if it is done or
        being done already."""
        with self._lock:
            self._listen(rank, asker, sink)
            if data.complete or id(data) in self._nesting:
                return
            load = self._loads.get(rank)
            if load is not None and load.data is data and load.nest and load.running:
                return  # its own load nests it
            self._nesting.add(id(data))

        def work() -> None:
            try:
                data.complete_levels()
                report: Report = Complete(data)
            except Exception as error:  # the view stays, with its top levels
                report = BackgroundFailure(
                    f"could not nest the slices ({type(error).__name__}: {error})"
                )
            finally:
                with self._lock:
                    self._nesting.discard(id(data))
            self._tell(rank, report)

        threading.Thread(target=work, name="kinetoscope-nest", daemon=True).start()

    def cancel(self, rank: int, asker: Any) -> None:
        """Stop the rank's load if it is still reading (a `Cancelled` report follows), and
        stop telling `asker` about the rank."""
        with self._lock:
            load = self._loads.get(rank)
            self._sinks.get(rank, {}).pop(id(asker), None)
        if load is not None:
            load.cancel()

    def over_bound(self) -> bool:
        """More views of held ranks than RESIDENT_RANKS: `trim` has work."""
        with self._lock:
            return sum(1 for r in self._held if self._has_view(r)) > RESIDENT_RANKS

    def trim(self, candidates: Iterable[int]) -> list[int]:
        """Past RESIDENT_RANKS views of held ranks, forget those of `candidates` (in their
        order: the first goes first) until within; they are no longer held. The ranks gone."""
        with self._lock:
            extra = sum(1 for r in self._held if self._has_view(r)) - RESIDENT_RANKS
            gone: list[int] = []
            for rank in candidates:
                if extra <= 0:
                    break
                if rank in self._held and self._has_view(rank):
                    self._held.discard(rank)
                    self._drop(rank)
                    gone.append(rank)
                    extra -= 1
            return gone

    def release(self, ranks: Iterable[int], asker: Any, last: int | None = None) -> None:
        """The screen that held `ranks` no longer draws them (it closed): the views stay
        within RANK_VIEWS_KEPT (`last`, the rank it showed last, counts as used last), and
        `asker` is told no more."""
        with self._lock:
            if last is not None and self._has_view(last):
                self._touch(last)
            for rank in ranks:
                self._held.discard(rank)
                if rank in self._queue:
                    self._queue.remove(rank)
            self.forget_asker(asker)
            self._trim_kept()

    def forget_asker(self, asker: Any) -> None:
        with self._lock:
            for sinks in self._sinks.values():
                sinks.pop(id(asker), None)

    def close(self) -> None:
        """The viewer closes: every load still reading is cancelled; nothing more is told."""
        with self._lock:
            loads = list(self._loads.values())
            self._queue.clear()
            self._sinks.clear()
        for load in loads:
            load.cancel()

    # -- inside ---------------------------------------------------------------------------------

    def _has_view(self, rank: int) -> bool:
        load = self._loads.get(rank)
        return load is not None and load.data is not None

    def _touch(self, rank: int) -> None:
        if rank in self._used:
            self._used.remove(rank)
        self._used.append(rank)

    def _listen(self, rank: int, asker: Any, sink: Sink) -> None:
        self._sinks.setdefault(rank, {})[id(asker)] = (asker, sink)

    def _drop(self, rank: int) -> None:
        self._loads.pop(rank, None)
        if rank in self._used:
            self._used.remove(rank)

    def _trim_kept(self) -> None:
        """Of the views of ranks not held, keep the RANK_VIEWS_KEPT used last."""
        free = [r for r in self._used if r not in self._held and self._has_view(r)]
        for rank in free[: max(0, len(free) - RANK_VIEWS_KEPT)]:
            self._drop(rank)

    def _start(self, rank: int, load: TraceLoad) -> TraceLoad:
        self._loads[rank] = load
        load.subscribe(lambda report: self._arrived(rank, load, report))
        return load

    def _start_queued(self) -> None:
        with self._lock:
            while self._queue and len(self._reading) < LOAD_THREADS:
                rank = self._queue.pop(0)
                self._reading.add(rank)
                load = TraceLoad(self.paths[rank], staged=True, nest=False, workers=1)
                load.first_frame_shown()  # no frame waits for it: the cache's work may follow
                self._start(rank, load)

    def _arrived(self, rank: int, load: TraceLoad, report: Report) -> None:
        """A report of `load` (from its thread, or replayed as it is subscribed)."""
        with self._lock:
            if self._loads.get(rank) is not load:
                return  # forgotten, or replaced by another load of the rank
            ended = isinstance(report, Ready | Failed | Cancelled)
            freed = ended and rank in self._reading
            if ended:
                self._reading.discard(rank)
            if isinstance(report, Ready):
                self._touch(rank)
                self._trim_kept()
            elif isinstance(report, Cancelled):
                self._drop(rank)
        self._tell(rank, report)
        if freed:
            self._start_queued()

    def _tell(self, rank: int, report: Report) -> None:
        with self._lock:
            sinks = [sink for _, sink in self._sinks.get(rank, {}).values()]
        for sink in sinks:
            try:
                sink(report)
            except Exception:  # the screen went away: the views can still be read
                pass
