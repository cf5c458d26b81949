"""The per-rank step of a job's summary on a Dask cluster (`summary DIR --scheduler ADDRESS`).

`analysis.job.map_ranks` runs `digest_rank(path, options)` through any executor with
`submit(fn, *args)`; here that executor is a `dask.distributed.Client`, so hundreds of ranks are
digested on as many machines as the cluster has, and only the small digests come back: the
merge (`analyze_job`) stays in this process. Dask is an optional extra
(`pip install 'kinetoscope[distributed]'`) and is imported only when a scheduler is asked for.

ADDRESS is one of:
- `tcp://HOST:8786` (or `HOST:8786`): a running scheduler (`dask scheduler` + `dask worker`,
  or a dask-jobqueue SLURMCluster/PBSCluster started elsewhere);
- a scheduler file (`dask scheduler --scheduler-file PATH`, common on HPC systems);
- `local` or `local:N`: a LocalCluster of N worker processes (default: this machine's CPUs),
  one thread each, started and stopped for this command.

The workers read the trace files themselves, by path: on a real cluster the files must be on a
file system every worker sees at the same path (relative paths are made absolute here first).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

EXTRA_HINT = "--scheduler needs Dask: pip install 'kinetoscope[distributed]'"
CONNECT_TIMEOUT = "20s"


class SchedulerError(Exception):
    """The cluster could not be used; the message is one line for the user."""


def _import_dask() -> Any:
    try:
        import dask.distributed as distributed
    except ImportError:
        raise SchedulerError(EXTRA_HINT) from None
    return distributed


def run_on_worker(function: Callable[..., Any], *args: Any) -> Any:
    """Runs on a Dask worker: `function(*args)`, with trace decoding kept in the worker's own
    process when that process may not start others (Dask's worker processes are daemonic by
    default, and a daemonic process cannot have children)."""
    import multiprocessing

    if multiprocessing.current_process().daemon:
        args = tuple(_serial_decoding(arg) for arg in args)
    return function(*args)


def _serial_decoding(arg: Any) -> Any:
    from kinetoscope.analysis.job import DigestOptions

    if isinstance(arg, DigestOptions) and arg.load_workers != 1:
        return replace(arg, load_workers=1)
    return arg


def _absolute(arg: Any) -> Any:
    """A relative path that exists here, made absolute: the workers run in other folders."""
    if isinstance(arg, str) and arg and not os.path.isabs(arg) and os.path.exists(arg):
        return os.path.abspath(arg)
    return arg


class DaskExecutor:
    """A `dask.distributed.Client` seen as a `concurrent.futures` executor (`submit`, `map`).

    Tasks are submitted as impure (`pure=False`): a trace file may change between two runs
    against one long-lived cluster, and its new digest must be computed, not recalled."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def submit(self, function: Callable[..., Any], *args: Any) -> Any:
        """A Dask future for `function(*args)`; `.result()` waits for it, as concurrent's does."""
        return self.client.submit(
            run_on_worker, function, *(_absolute(arg) for arg in args), pure=False
        )

    def map(self, function: Callable[..., Any], *iterables: Any) -> Iterator[Any]:
        """`function` over the zipped iterables, results in order (as `Executor.map`)."""
        futures = [self.submit(function, *args) for args in zip(*iterables)]
        return (future.result() for future in futures)


def _local_workers(text: str) -> int:
    if text == "local":
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except AttributeError:
            return max(1, os.cpu_count() or 1)
    count = text.partition(":")[2]
    if not count.isdigit() or int(count) < 1:
        raise SchedulerError(f"--scheduler {text}: use local or local:N with N 1 or more")
    return int(count)


@contextmanager
def dask_executor(address: str) -> Iterator[DaskExecutor]:
    """Connect to (or, for `local[:N]`, start) a Dask cluster; close what was opened on exit."""
    distributed = _import_dask()
    address = address.strip()
    cluster = None
    try:
        if address == "local" or address.startswith("local:"):
            workers = _local_workers(address)
            cluster = distributed.LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
            )
            client = distributed.Client(cluster)
        elif os.path.isfile(address):
            client = distributed.Client(scheduler_file=address, timeout=CONNECT_TIMEOUT)
        else:
            client = distributed.Client(address, timeout=CONNECT_TIMEOUT)
    except SchedulerError:
        raise
    except Exception as exc:  # an unreachable scheduler, a malformed address, a port in use
        if cluster is not None:
            cluster.close()
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SchedulerError(f"cannot use the Dask scheduler {address}: {reason}") from None
    try:
        yield DaskExecutor(client)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
