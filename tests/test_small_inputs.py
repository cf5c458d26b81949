"""Small inputs stay small (issue 30): a small trace, and a job whose ranks are tiny together, are
read in this process; no pool of worker processes (nor its server) is started for them, since
starting one costs more than it saves. The results are the same as with workers."""

from __future__ import annotations

import concurrent.futures
import gzip
import json
import multiprocessing.forkserver
import os

import pytest
from conftest import CORPUS
from kinetoscope.analysis.job import analyze_job, default_workers, job_document, map_ranks
from kinetoscope.parser import load, parallel
from kinetoscope.parser.ranks import discover
from test_job import write_job

DLRM = CORPUS / "multirank" / "dlrm_8rank"


@pytest.fixture
def no_pools(monkeypatch):
    """Any process pool or worker server started from now on fails the test."""
    started: list[str] = []

    def refuse(what: str):
        def start(*args, **kwargs):
            started.append(what)
            raise AssertionError(f"{what} started for a small input")

        return start

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", refuse("a process pool"))
    monkeypatch.setattr(multiprocessing.forkserver, "ensure_running", refuse("a worker server"))
    monkeypatch.delenv("KINETOSCOPE_PARALLEL_MIN_BYTES", raising=False)
    return started


def _documents_without_timings(document: dict) -> dict:
    for rank in document["ranks"]:
        rank.pop("digest_seconds")
    return document


def test_a_tiny_job_is_digested_without_a_pool(tmp_path, no_pools):
    write_job(tmp_path)
    files = discover([str(tmp_path)])
    paths = [f.path for f in files.files]
    here = job_document(analyze_job(map_ranks(paths), files))  # workers not given: it decides
    assert no_pools == []
    alone = job_document(analyze_job(map_ranks(paths, workers=1), files))
    assert _documents_without_timings(here) == _documents_without_timings(alone)


def test_a_job_big_enough_still_gets_its_pool(tmp_path, monkeypatch):
    """The same tiny job, with the size that pays for workers lowered below it: a pool starts
    (a thread pool in its place, recorded)."""
    write_job(tmp_path)
    paths = [f.path for f in discover([str(tmp_path)]).files]
    if default_workers(len(paths)) < 2:
        pytest.skip("one CPU: ranks are digested in this process at any size")
    assert not parallel.pays_for_workers(paths)
    monkeypatch.setenv("KINETOSCOPE_PARALLEL_MIN_BYTES", str(os.path.getsize(paths[0]) * 2))
    assert parallel.pays_for_workers(paths)
    started = []

    class Recorded(concurrent.futures.ThreadPoolExecutor):
        def __init__(self, max_workers=None, mp_context=None):
            started.append(max_workers)
            super().__init__(max_workers=max_workers)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Recorded)
    digests = map_ranks(paths, workers=None)
    assert started == [default_workers(len(paths))]
    assert all(d.error is None for d in digests)


def test_the_size_that_pays_counts_gzip_by_its_own_threshold(tmp_path, monkeypatch):
    monkeypatch.delenv("KINETOSCOPE_PARALLEL_MIN_BYTES", raising=False)
    body = json.dumps({"traceEvents": []}).encode()
    plain = tmp_path / "plain.json"
    plain.write_bytes(body)
    packed = tmp_path / "packed.json.gz"
    packed.write_bytes(gzip.compress(body))
    monkeypatch.setattr(parallel, "PARALLEL_MIN_PLAIN", plain.stat().st_size * 3)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_GZIP", packed.stat().st_size * 3)
    assert not parallel.pays_for_workers([str(plain), str(packed)])  # 1/3 + 1/3
    assert parallel.pays_for_workers([str(plain), str(packed), str(packed)])  # 3/3
    # A FIFO or a missing file is not measured: the pool's digest says what is wrong with it.
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert parallel.pays_for_workers([str(fifo)])
    assert parallel.pays_for_workers([str(tmp_path / "missing.json")])


def test_a_small_trace_loads_without_a_pool(tmp_path, no_pools):
    write_job(tmp_path)
    path = str(sorted(tmp_path.glob("*.json"))[0])
    trace = load(path, use_cache=False)
    assert trace.n_events > 0 and trace.workers == 1
    assert no_pools == []


@pytest.mark.skipif(not DLRM.is_dir(), reason="../shared/corpus is absent")
def test_the_tiny_8_rank_corpus_job_has_no_pool_and_the_same_summary(no_pools, capsys):
    from kinetoscope.commands.summary import run_job_summary

    assert run_job_summary([str(DLRM)], output="json") == 0
    assert no_pools == []
    here = json.loads(capsys.readouterr().out)
    files = discover([str(DLRM)])
    alone = job_document(analyze_job(map_ranks([f.path for f in files.files], workers=1), files))
    assert _documents_without_timings(here) == _documents_without_timings(
        json.loads(json.dumps(alone))
    )
