"""Trace -> plain results: nesting, operators, kernels, GPU idle gaps, steps, memory, rules."""

from .core import Analysis, analyze

__all__ = ["Analysis", "analyze"]
