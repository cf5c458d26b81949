"""The one message that carries a loader's report to a viewer app (the single-trace app, the
job viewer, the diff viewer).

A loader of tui/data (`TraceLoad`, `JobLoad`, `RankViews`) hands its reports to one sink from
its own thread; `reports_to(app, loader, key)` is that sink: it posts each report, as a
`LoadReported`, to the app, whose `on_load_reported` handles it in the UI's thread. `source`
says which loader sent it (an app may have several, and a replaced one's late reports are told
apart by it); `key` is what the app calls that loader (the diff's side, a rank).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from textual.message import Message
from textual.message_pump import MessagePump


class LoadReported(Message):
    """`report` (a dataclass of tui/data's loaders) from the loader `source`, called `key`."""

    def __init__(self, report: Any, source: Any, key: Hashable = None) -> None:
        super().__init__()
        self.report = report
        self.source = source
        self.key = key


def reports_to(target: MessagePump, source: Any, key: Hashable = None) -> Callable[[Any], None]:
    """A sink for `source.subscribe`: each report posted to `target` as a `LoadReported`."""

    def sink(report: Any) -> None:
        target.post_message(LoadReported(report, source, key))

    return sink
