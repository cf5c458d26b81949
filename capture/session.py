"""One profiling session: torch.profiler set up with a step window, a step source and a writer.

torch is imported only inside `CaptureSession.start`, so importing this module is cheap and works
without torch installed.
"""

from __future__ import annotations

import datetime as _dt
import functools
import gzip
import inspect
import os
import re
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INSTALL_HINT = "kinetoscope: capture needs PyTorch: pip install 'kinetoscope[capture]'"

TRACE_SUFFIX = ".pt.trace.json.gz"

# Step sources: where a "step" comes from.
STEPS_OPTIMIZER = "optimizer"  # after every optimizer.step() (a global post hook)
STEPS_FUNCTION = "function"  # after every return of a named function
STEPS_TIME = "time"  # every N seconds of wall time
STEPS_RUN = "run"  # no window: record the whole run (optimizer steps still marked)
STEPS_MANUAL = "manual"  # only explicit `step()` calls (Python API)


class CaptureError(Exception):
    """A capture could not be set up (bad option, existing output, no torch)."""


class CaptureUsage(CaptureError):
    """The command line asks for something that cannot be (exit status 2, as other usage
    errors): no program, an unknown option, an option's value out of its range."""


class TorchMissing(CaptureError):
    """torch is not importable."""


def import_torch() -> Any:
    """Import torch, or raise TorchMissing with the install hint."""
    try:
        import torch
        import torch.profiler  # noqa: F401
    except ImportError as exc:
        raise TorchMissing(INSTALL_HINT) from exc
    return torch


@dataclass
class StepSource:
    """Parsed `--steps-from` value."""

    kind: str = STEPS_OPTIMIZER
    function: str = ""  # for STEPS_FUNCTION: "name", "Class.method" or "pkg.mod:qualname"
    seconds: float = 0.0  # for STEPS_TIME

    @classmethod
    def parse(cls, text: str) -> StepSource:
        """Parse `optimizer`, `run`, `manual`, `function:NAME` or `time:SECONDS`."""
        kind, _, arg = text.partition(":")
        kind = kind.strip().lower()
        if kind in (STEPS_OPTIMIZER, STEPS_RUN, STEPS_MANUAL) and not arg:
            return cls(kind=kind)
        if kind == STEPS_FUNCTION and arg.strip():
            return cls(kind=kind, function=arg.strip())
        if kind == STEPS_TIME:
            from kinetoscope.common.numbers import NumberError, read_float, shown

            try:  # bounded: 5,000 nines would be an endless (inf) period
                seconds = read_float(arg, "--steps-from time:SECONDS", high=1e7)
            except NumberError as exc:
                raise CaptureUsage(f"{exc} (a positive number of seconds)") from None
            if seconds > 0:
                return cls(kind=kind, seconds=seconds)
            raise CaptureUsage(
                f"--steps-from time:SECONDS needs a positive number, got {shown(arg)}"
            )
        raise CaptureUsage(
            f"unknown step source {text!r}: use optimizer, function:NAME, time:SECONDS or run"
        )

    def describe(self) -> str:
        if self.kind == STEPS_FUNCTION:
            return f"calls of {self.function}"
        if self.kind == STEPS_TIME:
            return f"{self.seconds:g} s periods"
        if self.kind == STEPS_MANUAL:
            return "step() calls"
        return "optimizer steps"


@dataclass
class CaptureOptions:
    """What to record and when. The defaults keep the profiler's own cost low."""

    wait: int = 5
    warmup: int = 2
    active: int = 3
    steps: StepSource = field(default_factory=StepSource)
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    cuda: bool | None = None  # None: record CUDA activity when torch.cuda.is_available()

    def validate(self) -> None:
        if self.wait < 0 or self.warmup < 0:
            raise CaptureUsage("--wait and --warmup must be 0 or more")
        if self.active < 1:
            raise CaptureUsage("--active must be 1 or more")

    @property
    def windowed(self) -> bool:
        return self.steps.kind != STEPS_RUN

    @property
    def first_recorded_step(self) -> int:
        return self.wait + self.warmup

    def window_text(self) -> str:
        if not self.windowed:
            return "the whole run"
        first = self.first_recorded_step
        last = first + self.active - 1
        span = f"ProfilerStep#{first}" + (f"..#{last}" if last != first else "")
        return f"{span} (skip {self.wait}, warm up {self.warmup}, record {self.active})"


@dataclass
class CaptureResult:
    """What a finished session left behind."""

    path: Path | None  # None when nothing was recorded
    steps_seen: int  # steps counted by the step source
    options: CaptureOptions
    reason: str = ""  # why nothing was written, when path is None

    def recorded_text(self) -> str:
        """The steps the written trace holds: the window, or its start when the program ended
        inside it (the step it ended in is then cut short)."""
        opts = self.options
        last = opts.first_recorded_step + opts.active - 1
        if not opts.windowed or self.steps_seen > last:
            return opts.window_text()
        first, ended = opts.first_recorded_step, max(self.steps_seen, opts.first_recorded_step)
        span = f"ProfilerStep#{first}" + (f"..#{ended}" if ended != first else "")
        return (
            f"{span} of the window {opts.window_text()}: the program ended during "
            f"ProfilerStep#{ended}"
        )


def default_output_path(label: str, directory: Path | None = None) -> Path:
    """A readable, unused name: `<label>_<YYYYmmdd-HHMMSS>.pt.trace.json.gz` (with `_2`... on clash)."""
    directory = Path.cwd() if directory is None else directory
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("._-") or "trace"
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    candidate = directory / f"{stem}_{stamp}{TRACE_SUFFIX}"
    counter = 2
    while candidate.exists():
        candidate = directory / f"{stem}_{stamp}_{counter}{TRACE_SUFFIX}"
        counter += 1
    return candidate


def check_output(path: Path, force: bool) -> None:
    """Refuse to overwrite an existing file without force; the folder must exist."""
    if path.exists() and not force:
        raise CaptureError(f"{path} exists; pass --force to overwrite it")
    if not path.parent.is_dir():
        raise CaptureError(f"folder {path.parent} does not exist")


class CaptureSession:
    """Owns one torch.profiler.profile: start it, count steps, write the trace, stop it."""

    def __init__(
        self,
        output: Path,
        options: CaptureOptions,
        *,
        force: bool = False,
        announce: Callable[[str], None] | None = None,
    ) -> None:
        options.validate()
        self.output = Path(output)
        self.options = options
        self.force = force
        self.steps_seen = 0
        self.written: Path | None = None
        self._announce = announce or (lambda text: print(text, file=sys.stderr))
        self._profiler: Any = None
        self._undo: list[Callable[[], None]] = []
        self._counting = False
        self._in_step = False
        self._main_optimizer_id: int | None = None
        self._distributed_noted = False
        check_output(self.output, force)

    # lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Import torch, start the profiler and the step source."""
        torch = import_torch()
        from torch.profiler import ProfilerAction, ProfilerActivity, profile, schedule

        # The profiler's first warm-up imports torch._inductor (about a second). Doing it now
        # keeps that pause out of the program's run, where it would land inside a step.
        try:
            hasattr(torch, "_inductor")
        except Exception:  # noqa: BLE001 - the profiler will report its own problem later
            pass
        activities = [ProfilerActivity.CPU]
        cuda = self.options.cuda
        if cuda is None:
            cuda = bool(torch.cuda.is_available())
        if cuda:
            activities.append(ProfilerActivity.CUDA)
        if self.options.windowed:
            step_schedule = schedule(
                wait=self.options.wait,
                warmup=self.options.warmup,
                active=self.options.active,
                repeat=1,
            )
        else:
            # Always recording, but through a schedule so that steps still get
            # ProfilerStep#N annotations.
            def step_schedule(step: int) -> Any:
                return ProfilerAction.RECORD

        self._profiler = profile(
            activities=activities,
            schedule=step_schedule,
            on_trace_ready=self._on_trace_ready,
            record_shapes=self.options.record_shapes,
            profile_memory=self.options.profile_memory,
            with_stack=self.options.with_stack,
        )
        self._profiler.start()
        self._counting = True
        self._install_step_source(torch)

    def step(self) -> None:
        """Mark the end of one step (and the start of the next)."""
        if not self._counting or self._profiler is None or self._in_step:
            # _in_step: a timer tick that lands while a step is being processed (the first
            # warm-up step can take a second, importing parts of torch) is dropped.
            return
        self._in_step = True
        try:
            self.steps_seen += 1
            # A Ctrl-C in the middle of the profiler's state change would leave it half
            # switched and unable to stop cleanly; hold it until the step is done.
            with _sigint_deferred(None, reraise=True):
                self._profiler.step()
            if not self._distributed_noted:
                self._note_distributed()
        finally:
            self._in_step = False
        if self.written is not None and self.options.windowed:
            # The window is saved; later steps need no bookkeeping at all.
            self._counting = False

    def _note_distributed(self) -> None:
        """Record `distributedInfo` (backend, rank, world size, process groups) in the trace when
        the program set up its process group after the recording began.

        torch.profiler notes it only when the recording starts: with --whole-run, or when the
        program calls init_process_group() late, the trace would not say which rank it is.
        """
        profiler = self._profiler
        try:
            from torch.profiler import ProfilerAction

            recording = profiler.current_action in (
                ProfilerAction.RECORD,
                ProfilerAction.RECORD_AND_SAVE,
            )
            if not recording:
                return
            if "distributedInfo" in getattr(profiler, "_trace_metadata", {}):
                self._distributed_noted = True
                return
            info = profiler._get_distributed_info()
            if info:
                import json

                profiler.add_metadata_json("distributedInfo", json.dumps(info, default=str))
                self._distributed_noted = True
        except Exception:  # noqa: BLE001 - a private API; without it, the file name gives the rank
            self._distributed_noted = True

    def stop(self) -> CaptureResult:
        """Stop the step source and the profiler; write what was recorded if not yet written."""
        self._counting = False
        for undo in reversed(self._undo):
            try:
                undo()
            except Exception:  # noqa: BLE001 - cleanup must not hide the program's own result
                pass
        self._undo.clear()
        profiler, self._profiler = self._profiler, None
        failure = ""
        if profiler is not None:
            try:
                with _sigint_deferred(self._announce, reraise=False):
                    profiler.stop()
            except Exception as exc:  # noqa: BLE001 - report it; the program's result matters more
                failure = f"the profiler failed while stopping: {type(exc).__name__}: {exc}"
        reason = ""
        if self.written is None:
            reason = failure or self._nothing_recorded_reason()
        return CaptureResult(self.written, self.steps_seen, self.options, reason)

    # writing ------------------------------------------------------------------------------

    def _on_trace_ready(self, profiler: Any) -> None:
        with _sigint_deferred(self._announce, reraise=True):
            write_profiler_trace(profiler, self.output)
        self.written = self.output
        if self.options.windowed and self._counting:
            self._announce(
                f"kinetoscope: recording window done, trace written to {self.output}; the rest "
                "of the run is not recorded (Ctrl-C ends it early)"
            )

    def _nothing_recorded_reason(self) -> str:
        opts = self.options
        if not opts.windowed:
            return "the profiler recorded nothing"
        needed = opts.first_recorded_step + 1
        source = opts.steps.describe()
        if self.steps_seen == 0:
            hint = {
                STEPS_OPTIMIZER: "no optimizer.step() was called; try --steps-from "
                "function:NAME, --steps-from time:SECONDS or --whole-run",
                STEPS_FUNCTION: f"{opts.steps.function} was never called (or never returned)",
                STEPS_TIME: "the program ended before the first period; try a shorter one",
                STEPS_MANUAL: "step() was never called",
            }.get(opts.steps.kind, "")
            return f"no steps were seen: {hint}"
        plural = "step was" if self.steps_seen == 1 else "steps were"
        # The window records ProfilerStep#first..#last: its first step is kept once `needed` steps
        # have run, the whole window once `needed + active - 1` have.
        whole = needed + opts.active - 1
        need = f"{needed} steps" + (
            f" to record its first step, {whole} for all of it" if whole != needed else ""
        )
        return (
            f"only {self.steps_seen} {plural} seen (steps from {source}) but the recording "
            f"window, {opts.window_text()}, needs {need}; lower --wait/--warmup or use "
            "--whole-run"
        )

    # step sources ------------------------------------------------------------------------

    def _install_step_source(self, torch: Any) -> None:
        kind = self.options.steps.kind
        if kind in (STEPS_OPTIMIZER, STEPS_RUN):
            self._install_optimizer_hook(torch)
        elif kind == STEPS_FUNCTION:
            self._install_function_hook(self.options.steps.function)
        elif kind == STEPS_TIME:
            self._install_timer(self.options.steps.seconds)

    def _install_optimizer_hook(self, torch: Any) -> None:
        from torch.optim.optimizer import Optimizer, register_optimizer_step_post_hook

        # torch calls step post hooks inside the `Optimizer.step#...` range; a profiler step taken
        # there would end ProfilerStep#N while that range is still open (a slice outliving its
        # parent in every captured trace). So the hook only notes the step, and the step is taken
        # when the optimizer's step returns: torch wraps each optimizer class's step with
        # `Optimizer.profile_hook_step` when its first instance is made, and classes wrapped
        # while we run get an outer wrapper that takes the step after the range closes. A class
        # wrapped before the capture began steps inside the range, as before.
        pending = {"step": False, "depth": 0}

        def after_optimizer_step(optimizer: Any, args: Any, kwargs: Any) -> None:
            # With several optimizers (a GAN, say), one training step calls each of them; count
            # the steps of the first optimizer that ever stepped.
            if self._main_optimizer_id is None:
                self._main_optimizer_id = id(optimizer)
            if id(optimizer) != self._main_optimizer_id:
                return
            if pending["depth"] > 0:
                pending["step"] = True
            else:
                self.step()

        original = inspect.getattr_static(Optimizer, "profile_hook_step", None)
        if isinstance(original, staticmethod):

            def profile_hook_step(func: Callable[..., Any]) -> Callable[..., Any]:
                inner = original.__func__(func)

                @functools.wraps(inner)
                def stepping_after(*args: Any, **kwargs: Any) -> Any:
                    pending["depth"] += 1
                    try:
                        return inner(*args, **kwargs)
                    finally:
                        pending["depth"] -= 1
                        if pending["depth"] == 0 and pending["step"]:
                            pending["step"] = False
                            self.step()

                return stepping_after

            Optimizer.profile_hook_step = staticmethod(profile_hook_step)  # type: ignore[method-assign]

            def restore() -> None:
                Optimizer.profile_hook_step = original  # type: ignore[method-assign]

            self._undo.append(restore)

        handle = register_optimizer_step_post_hook(after_optimizer_step)
        self._undo.append(handle.remove)

    def _install_function_hook(self, spec: str) -> None:
        if ":" in spec:
            module_name, _, qualname = spec.partition(":")
            import importlib

            try:
                owner: Any = importlib.import_module(module_name)
            except ImportError as exc:
                raise CaptureError(f"cannot import {module_name} for --steps-from: {exc}") from exc
            self._wrap_attribute(owner, qualname, spec)
        else:
            self._discover_function(spec)

    def _wrap_attribute(self, root: Any, qualname: str, spec: str) -> None:
        parts = qualname.split(".")
        owner = root
        for part in parts[:-1]:
            owner = getattr(owner, part, None)
            if owner is None:
                raise CaptureError(f"--steps-from function:{spec}: {part} not found")
        name = parts[-1]
        original = owner.__dict__.get(name) if hasattr(owner, "__dict__") else None
        if original is None:
            original = getattr(owner, name, None)
        if original is None or not callable(original):
            raise CaptureError(f"--steps-from function:{spec}: no function {qualname}")
        setattr(owner, name, self._stepping_wrapper(original))
        self._undo.append(lambda: setattr(owner, name, original))

    def _stepping_wrapper(self, function: Callable[..., Any]) -> Callable[..., Any]:
        import functools

        if isinstance(function, (staticmethod, classmethod)):
            inner = self._stepping_wrapper(function.__func__)
            return type(function)(inner)

        @functools.wraps(function)
        def stepping(*args: Any, **kwargs: Any) -> Any:
            try:
                return function(*args, **kwargs)
            finally:
                self.step()

        return stepping

    def _discover_function(self, qualname: str) -> None:
        """Find a function defined by the program itself on its first call, then wrap it.

        A profile hook watches calls only until the first call of a matching function returns
        (that call counts as a step); after that the function is replaced by a wrapper in its
        module or class, so there is no per-call hook cost for the rest of the run.
        """
        short = qualname.rsplit(".", 1)[-1]
        state: dict[str, Any] = {"frame": None}

        def watch(frame: Any, event: str, arg: Any) -> None:
            code = frame.f_code
            if event == "call" and state["frame"] is None and code.co_name == short:
                if getattr(code, "co_qualname", qualname) in (qualname, short) or (
                    "." not in qualname
                ):
                    state["frame"] = frame
            elif event == "return" and frame is state["frame"]:
                sys.setprofile(None)
                self._patch_discovered(frame, qualname)
                self.step()

        def remove() -> None:
            if sys.getprofile() is watch:
                sys.setprofile(None)

        sys.setprofile(watch)
        self._undo.append(remove)

    def _patch_discovered(self, frame: Any, qualname: str) -> None:
        code = frame.f_code
        parts = getattr(code, "co_qualname", qualname).split(".")
        if "<locals>" in parts:
            self._announce(
                f"kinetoscope: {qualname} is a nested function; only its first call counts"
            )
            return
        owner: Any = None
        container: Any = frame.f_globals
        for part in parts[:-1]:
            owner = container.get(part) if isinstance(container, Mapping) else None
            if owner is None:
                return
            container = vars(owner)
        target = container.get(parts[-1]) if isinstance(container, Mapping) else None
        function = target.__func__ if isinstance(target, (staticmethod, classmethod)) else target
        if getattr(function, "__code__", None) is not code:
            return
        wrapped = self._stepping_wrapper(target)
        if owner is None:
            frame.f_globals[parts[-1]] = wrapped
            globals_dict = frame.f_globals
            self._undo.append(lambda: globals_dict.__setitem__(parts[-1], target))
        else:
            setattr(owner, parts[-1], wrapped)
            self._undo.append(lambda: setattr(owner, parts[-1], target))

    def _install_timer(self, seconds: float) -> None:
        if (
            not hasattr(signal, "setitimer")
            or threading.current_thread() is not threading.main_thread()
        ):
            raise CaptureError("--steps-from time needs a POSIX system and the main thread")

        def tick(signum: int, frame: Any) -> None:
            self.step()

        previous = signal.signal(signal.SIGALRM, tick)
        signal.setitimer(signal.ITIMER_REAL, seconds, seconds)

        def remove() -> None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

        self._undo.append(remove)


def write_profiler_trace(profiler: Any, output: Path) -> None:
    """Export the profiler's trace to `output` (gzip'd when it ends in .gz), atomically."""
    output = Path(output)
    partial = output.with_name(f".{output.name}.{os.getpid()}.partial")
    plain = partial.with_suffix(".json")
    try:
        profiler.export_chrome_trace(str(plain))
        if output.name.endswith(".gz"):
            with open(plain, "rb") as source, gzip.open(partial, "wb", compresslevel=5) as sink:
                shutil.copyfileobj(source, sink, length=4 << 20)
            os.replace(partial, output)
        else:
            os.replace(plain, output)
    finally:
        for leftover in (plain, partial):
            try:
                leftover.unlink()
            except FileNotFoundError:
                pass


class _sigint_deferred:
    """Hold a Ctrl-C that arrives while the trace is being written.

    With `reraise`, the held Ctrl-C is raised once writing is done (the program was interrupted
    mid-run and should stop); without it, it is dropped (we are already stopping). Nested uses
    leave the outermost one in charge.
    """

    _depth = 0

    def __init__(self, announce: Callable[[str], None] | None, *, reraise: bool) -> None:
        self._announce = announce
        self._reraise = reraise
        self._previous: Any = None
        self._pending = False
        self._active = False

    def __enter__(self) -> _sigint_deferred:
        outermost = _sigint_deferred._depth == 0
        _sigint_deferred._depth += 1
        if outermost and threading.current_thread() is threading.main_thread():
            try:
                self._previous = signal.signal(signal.SIGINT, self._hold)
                self._active = True
            except ValueError:
                self._active = False
        return self

    def _hold(self, signum: int, frame: Any) -> None:
        self._pending = True
        if self._announce is not None:
            self._announce("kinetoscope: still writing the trace, one moment...")

    def __exit__(self, *exc: Any) -> None:
        _sigint_deferred._depth -= 1
        if self._active:
            signal.signal(signal.SIGINT, self._previous)
        if self._pending and self._reraise and exc[0] is None:
            raise KeyboardInterrupt
