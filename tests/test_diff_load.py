"""How `kinetoscope diff` loads and analyses its two traces (kinetoscope/present/report_diff.py's
`load_sessions`, docs/diff.md "Loading the two traces"): it computes no result of either session
that the diff does not show, what it computes ahead (beside the second load) gives the document
computing it on demand gives, and of two traces that fail to load, the first loaded is named."""

from __future__ import annotations

import gzip
import json

import pytest
from kinetoscope.analysis.diff import PREPARE_PLANS, diff_sessions
from kinetoscope.analysis.session import TraceSession, derived
from test_diff import base_events, new_events, write

from kinetoscope.commands import diff as diff_command
from kinetoscope.common.errors import exit_status
from kinetoscope.present import report_diff

# Every result a diff reads from each session (docs/diff.md): steps and their metrics (idle
# gaps, sync), operators (the nesting's order and outermost instances over the CPU groups),
# kernels (GPU groups, the links to their launches). Nothing of the summary's own: no memory
# per operator, no findings, no compile lens, no operator or kernel tables.
DIFF_RESULTS = {"classes", "cpu_groups", "gpu_groups", "links", "nesting", "idle", "steps", "sync"}
ALL_RESULTS = {name for name, value in vars(TraceSession).items() if isinstance(value, derived)}


def spied(monkeypatch):
    """Record the sessions `run_diff` loads."""
    seen = []
    real = report_diff.load_sessions

    def load_sessions(*args, **kwargs):
        pair = real(*args, **kwargs)
        seen.append(pair)
        return pair

    monkeypatch.setattr(report_diff, "load_sessions", load_sessions)
    return seen


def computed(session):
    return {name for name in ALL_RESULTS if session.has(name) or session.failure(name)}


@pytest.mark.parametrize("output", ["json", "text", "csv"])
@pytest.mark.parametrize("whole", [False, True], ids=["steps", "whole"])
def test_the_diff_computes_only_the_results_it_shows(tmp_path, monkeypatch, capsys, output, whole):
    assert DIFF_RESULTS < ALL_RESULTS  # the names are the session's
    assert set(sum(PREPARE_PLANS, ())) == DIFF_RESULTS  # what is computed ahead, no more
    strip = (
        (lambda events: [e for e in events if "ProfilerStep" not in e["name"]]) if whole else list
    )
    base = write(tmp_path / "base.json", strip(base_events()))
    new = write(tmp_path / "new.json", strip(new_events()))
    seen = spied(monkeypatch)
    csv_dir = str(tmp_path / "csv") if output == "csv" else None
    code = diff_command.run_diff(base, new, output="json" if output == "json" else "text",
                                csv_dir=csv_dir)  # fmt: skip
    assert code == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    if output == "json":
        assert json.loads(out)["whole_traces"] is whole
    [(b, n)] = seen
    assert computed(b) == DIFF_RESULTS
    assert computed(n) == DIFF_RESULTS


def gzipped(path):
    packed = path.with_name(path.name + ".gz")
    packed.write_bytes(gzip.compress(path.read_bytes()))
    return str(packed)


def test_the_analyses_ahead_give_the_document_of_none_ahead(tmp_path, monkeypatch):
    # Decoded by worker processes however small (as a big trace is).
    monkeypatch.setenv("KINETOSCOPE_PARALLEL_MIN_BYTES", "1")
    monkeypatch.setenv("KINETOSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    base = write(tmp_path / "base.json", base_events(steps=6))
    new = write(tmp_path / "new.json", new_events(steps=6))
    new_gz = gzipped(tmp_path / "new.json")
    for b, n in ((base, new), (base, new_gz), (new_gz, base)):
        documents = []
        for overlap in (True, False):
            sessions = report_diff.load_sessions(b, n, overlap=overlap)
            assert [s.trace.source.path for s in sessions] == [b, n]
            if overlap:
                for session in sessions:  # analysed ahead, before the diff asks
                    assert computed(session) == DIFF_RESULTS
            diff = diff_sessions(*sessions)
            documents.append(report_diff.summary_json(report_diff.diff_document(diff, b, n)))
        assert documents[0] == documents[1]


def broken(path, gz=False):
    data = b"garbage, not a trace " * 10
    path.write_bytes(gzip.compress(data) if gz else data)
    return str(path)


def test_of_two_traces_that_fail_to_load_the_first_loaded_is_named(tmp_path, monkeypatch, capsys):
    good = write(tmp_path / "good.json", base_events())
    bad_plain = broken(tmp_path / "bad.json")
    bad_gz = broken(tmp_path / "bad.json.gz", gz=True)
    bad_other = broken(tmp_path / "other.json")

    def failing(base, new):
        assert exit_status(diff_command.run_diff, base, new, output="json") == 1
        err = capsys.readouterr().err
        assert err.startswith("kinetoscope: ") and err.count("\n") == 1, err
        return err

    # A gzip'd NEW is loaded first: its error is the one said, BASE's failure or not.
    assert bad_gz in failing(bad_plain, bad_gz)
    # Otherwise BASE first; the second's error only when the first loaded.
    assert bad_plain in failing(bad_plain, bad_other)
    assert bad_other in failing(good, bad_other)
    assert bad_plain in failing(bad_plain, good)
    assert bad_gz in failing(bad_gz, good)
