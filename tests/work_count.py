"""Work counted in Python calls, not seconds: a test that guards against a cost that grows with
the input (a loop over a 50 MB name, a pass per row in Python) counts the calls made while the
code runs, so its verdict does not depend on how busy the machine running it is."""

from __future__ import annotations

import sys
import threading
from typing import Any


class CallCount:
    """Counts Python and C function calls (profile hook events "call" and "c_call"; `python_only`:
    "call" only) made in this thread, and in threads started while counting, between enter and
    exit."""

    def __init__(self, python_only: bool = False) -> None:
        self.calls = 0
        self._events = ("call",) if python_only else ("call", "c_call")

    def _hook(self, frame: Any, event: str, arg: Any) -> None:
        if event in self._events:
            self.calls += 1

    def __enter__(self) -> CallCount:
        self._previous = sys.getprofile()
        sys.setprofile(self._hook)
        threading.setprofile(self._hook)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.setprofile(self._previous)
        threading.setprofile(None)


def calls_made(function: Any, *args: Any, **kwargs: Any) -> tuple[int, Any]:
    """Python and C calls made by `function(*args, **kwargs)`, and what it returned."""
    with CallCount() as count:
        result = function(*args, **kwargs)
    return count.calls, result
