"""`Analysis`: every analysis of one Trace, each computed on first use and then kept."""

from __future__ import annotations

from functools import cached_property

import numpy as np
from kinetoscope.parser.model import Trace

from .classify import Groups, RowClasses, classify, group_rows
from .idle import IdleAnalysis, compute_idle
from .kernels import KernelTable, compute_kernels, main_launchers
from .links import Links, compute_links
from .memory import MemoryGroup, compute_memory
from .nesting import Nesting, compute_nesting
from .operators import OperatorInstance, OperatorTable, compute_operators, operator_instance
from .steps import Steps, compute_steps


class Analysis:
    """Lazily computed analyses of a trace. Never changes the trace."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace

    @cached_property
    def classes(self) -> RowClasses:
        return classify(self.trace)

    @cached_property
    def cpu_groups(self) -> Groups:
        return group_rows(self.trace, self.classes.cpu)

    @cached_property
    def gpu_groups(self) -> Groups:
        return group_rows(self.trace, self.classes.gpu)

    @cached_property
    def nesting(self) -> Nesting:
        return compute_nesting(self.trace, self.classes.cpu, self.cpu_groups.index)

    @cached_property
    def links(self) -> Links:
        return compute_links(self.trace, self.classes.gpu, self.classes.runtime)

    @cached_property
    def operators(self) -> OperatorTable:
        return compute_operators(self.trace, self.nesting, self.cpu_groups, self.links)

    @cached_property
    def kernels(self) -> KernelTable:
        return compute_kernels(self.trace, self.gpu_groups, self.links, self.nesting)

    @cached_property
    def kernel_launchers(self) -> np.ndarray:
        """Per kernel group: the operator group that launched most of its GPU time, or -1."""
        return main_launchers(self.trace, self.kernels, self.links, self.cpu_groups)

    @cached_property
    def idle(self) -> IdleAnalysis:
        return compute_idle(self.trace, self.classes.kind, self.links)

    @cached_property
    def steps(self) -> Steps:
        c = self.classes
        return compute_steps(self.trace, c.cpu, c.gpu, c.kind, c.runtime)

    @cached_property
    def memory(self) -> list[MemoryGroup]:
        return compute_memory(self.trace.memory)

    @cached_property
    def findings(self) -> list:  # list[Finding]; typed loosely to keep rules importable lazily
        from .rules import run_rules

        return run_rules(self)

    # -- queries for the viewer --------------------------------------------------------------

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


def analyze(trace: Trace) -> Analysis:
    """The Analysis of a trace, created once and kept with it."""
    cached = trace.__dict__.get("_analysis")
    if cached is None:
        cached = Analysis(trace)
        trace.__dict__["_analysis"] = cached
    return cached
