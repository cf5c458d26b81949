"""What touching memory costs on this machine: fresh pages against pages touched just before.

    python benchmarks/bench_touch.py [--gb 0.5 1 2 4] [--pause 45]

In one fresh process per round, for each size: allocate a numpy array of that many GB and
write every page once (`np.ones`: the kernel's page faults and zeroing, plus the write), then
write it again (the pages are mapped now: the write alone); the array is freed before the next
size. Rounds: one, a second straight after it (the pages the first freed are still backed),
and, with `--pause`, a third after that many seconds idle. On a virtual machine whose host
backs the guest's memory lazily and takes freed pages back, the first write of a page costs a
host-side fault too: then a process that needs more memory than recent ones freed pays several
times more per GB for the excess, which makes a big trace's run look slower per GB than a small
one's measured straight after another small one (benchmarks/run.py pairs the runs for that).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

ROUND = """
import sys, time
import numpy as np
for gb in map(float, sys.argv[1:]):
    began = time.perf_counter()
    a = np.ones(int(gb * 2**30) // 8)
    first = time.perf_counter() - began
    began = time.perf_counter()
    a += 1
    again = time.perf_counter() - began
    print(f"{gb:5.2f} GB: first write {first / gb:.3f} s/GB, again {again / gb:.3f} s/GB")
    del a
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, nargs="+", default=[0.5, 1, 2, 4])
    parser.add_argument("--pause", type=float, default=45.0, help="idle seconds before round 3")
    args = parser.parse_args()
    sizes = [str(gb) for gb in args.gb]
    for label, pause in (
        ("first round", 0.0),
        ("straight after", 0.0),
        ("after a pause", args.pause),
    ):
        if pause:
            time.sleep(pause)
        print(f"{label}{f' ({pause:.0f} s idle)' if pause else ''}:", flush=True)
        subprocess.run([sys.executable, "-c", ROUND, *sizes], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
