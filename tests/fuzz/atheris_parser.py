#!/usr/bin/env python3
"""Coverage-guided fuzzing of the parser and the analysis with atheris (libFuzzer), for long runs.

    pip install atheris
    python tests/fuzz/atheris_parser.py -fork=1 -max_total_time=1800 -timeout=30 \
        -artifact_prefix=/tmp/kinetoscope-fuzz- /tmp/kinetoscope-corpus tests/fuzz/regressions

The first folder collects the inputs that reach new code (start it empty; it may be reused);
the second seeds the run with the regression inputs. `-fork=1` runs the fuzzing in child
processes that are restarted now and then: atheris's coverage bookkeeping grows by tens of KB
per input, so a single process runs out of memory (2 GB) within minutes. Every input must either load or raise
TraceError, and whatever loads must pass the checks of the CI fuzz tests. A crash, or an input
slower than -timeout seconds, is written next to -artifact_prefix: add it to
tests/fuzz/regressions/ once it is fixed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

with atheris.instrument_imports(include=["kinetoscope"]):
    from kinetoscope.parser import TraceError, loads

from fuzz.harness import check_analysis, check_trace  # noqa: E402


def one_input(data: bytes) -> None:
    try:
        trace = loads(data, "fuzz.json")
    except TraceError as error:
        assert "\n" not in str(error)
        return
    check_trace(trace)
    check_analysis(trace)


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
