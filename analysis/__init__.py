"""Trace -> plain results: nesting, operators, kernels, GPU idle gaps, steps, memory, rules.

`TraceSession` (session.py) owns one trace's derived results; everything else here is a pure
function from a Trace (and other results) to a result.
"""

from .session import AnalysisFailed, TraceSession

__all__ = ["AnalysisFailed", "TraceSession"]
