"""benchmarks/run.py's process-tree memory: a child started from a thread other than the
main one (as a ProcessPoolExecutor's or a forkserver's helper threads start them) counts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

# The parent starts, from a second thread, a child that holds ~200 MiB resident, says its
# pid, then waits.
PARENT = """
import subprocess, sys, threading, time
CHILD = "b = bytearray(200 << 20); b[::4096] = b'x' * len(b[::4096]); print('ready', flush=True); import time; time.sleep(60)"
def start():
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE)
    proc.stdout.readline()
    print(proc.pid, flush=True)
    proc.wait()
threading.Thread(target=start).start()
time.sleep(60)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_tree_rss_counts_children_of_other_threads(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import run

    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE)
    child = 0
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        time.sleep(0.1)
        assert run.tree_rss_kb(parent.pid) > 200 << 10
    finally:
        if child:
            os.kill(child, signal.SIGKILL)
        parent.kill()
        parent.wait()
