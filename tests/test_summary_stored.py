"""A second `summary --json` of the same file reads the text the first kept in the model cache
entry (issue 30): byte-identical to a cold run, no analysis. A tampered, foreign or stale result
is never used: it is detected and the analysis runs again."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, corpus_files
from kinetoscope.analysis import stored
from kinetoscope.parser import cache

from kinetoscope.commands.summary import run_summary
from kinetoscope.present.report_summary import summary_json

SAMPLES = REPO / "sample_traces"


@pytest.fixture
def cache_all(monkeypatch):
    """Every trace is cached, however small (the threshold is for speed, not correctness)."""
    monkeypatch.setattr(cache, "MIN_CACHED_BYTES", 0)


@pytest.fixture
def analyses(monkeypatch):
    """How many summary documents were built (the analysis that a stored text skips)."""
    import kinetoscope.analysis.summary as summary_module

    count = [0]
    build = summary_module.build_summary

    def counted(of):
        count[0] += 1
        return build(of)

    monkeypatch.setattr(summary_module, "build_summary", counted)
    return count


def _summary(path, capsys) -> str:
    capsys.readouterr()
    assert run_summary(str(path), output="json") == 0
    return capsys.readouterr().out


def _copy(tmp_path: Path, name: str = "synthetic_gpu_training.pt.trace.json.gz") -> Path:
    target = tmp_path / name
    shutil.copyfile(SAMPLES / name, target)
    return target


def _extra(path: Path) -> Path:
    return cache.entry_dir(str(path)) / f"extra-{stored.SUMMARY_EXTRA}"


def test_a_warm_summary_is_the_cold_one_without_the_analysis(tmp_path, capsys, cache_all, analyses):
    path = _copy(tmp_path)
    cold = _summary(path, capsys)
    assert analyses[0] == 1
    assert cache.has_entry(str(path)) and _extra(path).is_dir()  # the model and the summary
    for _ in range(2):
        assert _summary(path, capsys) == cold
    assert analyses[0] == 1


def test_a_small_trace_is_not_cached_by_summary(tmp_path, capsys, analyses):
    path = _copy(tmp_path)  # 13 KB: under the size at which the cache pays
    first = _summary(path, capsys)
    assert not cache.entry_dir(str(path)).exists()
    assert _summary(path, capsys) == first and analyses[0] == 2


def test_another_spelling_of_the_path_gets_its_own_path_in_the_document(
    tmp_path, capsys, cache_all, analyses, monkeypatch
):
    path = _copy(tmp_path)
    _summary(path, capsys)
    monkeypatch.chdir(tmp_path)
    warm = _summary(path.name, capsys)  # relative: the same file, the same entry
    assert analyses[0] == 1
    shutil.rmtree(cache.cache_root())
    assert warm == _summary(path.name, capsys)  # what a cold run prints for that spelling
    assert f'"path": "{path.name}"' in warm


def test_a_tampered_stored_text_is_detected_and_recomputed(tmp_path, capsys, cache_all, analyses):
    path = _copy(tmp_path)
    cold = _summary(path, capsys)
    text = _extra(path) / "text.npy"
    data = bytearray(text.read_bytes())
    at = data.index(b'"events": ') + len(b'"events": ')
    data[at] = ord("9") if data[at] != ord("9") else ord("8")  # same size, still JSON
    text.write_bytes(bytes(data))
    assert _summary(path, capsys) == cold
    assert analyses[0] == 2
    assert _summary(path, capsys) == cold and analyses[0] == 2  # rewritten, used again


def test_a_stored_text_whose_crc_is_wrong_is_not_used(tmp_path, capsys, cache_all, analyses):
    """Even with its identity as recorded (the CRC is the check that reads every byte): the
    manifest is rewritten with a wrong CRC and a valid hash of itself."""
    path = _copy(tmp_path)
    cold = _summary(path, capsys)
    folder = _extra(path)
    manifest = cache._read_manifest(folder, cache.ExtraManifest)
    facts = manifest.files["text"]
    files = {**manifest.files, "text": cache.FileFacts(
        facts.bytes, facts.crc32 ^ 1, facts.dtype, facts.shape,
        ino=facts.ino, mtime_ns=facts.mtime_ns, ctime_ns=facts.ctime_ns,
    )}  # fmt: skip
    body = {"key": manifest.key, "version": manifest.version, "files": files}
    (folder / cache.MANIFEST).write_bytes(cache.manifest_bytes(body))
    assert _summary(path, capsys) == cold and analyses[0] == 2


def test_a_damaged_manifest_or_foreign_version_is_not_used(
    tmp_path, capsys, cache_all, analyses, monkeypatch
):
    path = _copy(tmp_path)
    cold = _summary(path, capsys)
    manifest = _extra(path) / cache.MANIFEST
    manifest.write_bytes(manifest.read_bytes().replace(b'"version":', b'"version": '))
    assert _summary(path, capsys) == cold and analyses[0] == 2
    # Made by other code (another version): not this code's result.
    monkeypatch.setattr(stored, "_versions", {summary_json: 12345})
    assert _summary(path, capsys) == cold and analyses[0] == 3
    monkeypatch.setattr(stored, "_versions", {})
    assert _summary(path, capsys) == cold and analyses[0] == 4  # its own, written by the first


def test_a_changed_trace_invalidates_its_stored_summary(tmp_path, capsys, cache_all, analyses):
    path = _copy(tmp_path)
    old = _summary(path, capsys)
    shutil.copyfile(SAMPLES / "demo_cpu.pt.trace.json.gz", path)  # other content, same name
    new = _summary(path, capsys)
    assert analyses[0] == 2 and new != old
    shutil.rmtree(cache.cache_root())
    assert _summary(path, capsys) == new


def test_a_damaged_model_entry_is_read_again_from_the_file(tmp_path, capsys, cache_all, analyses):
    """No stored text, and the model's arrays fail their CRC: the trace is read from its file,
    not analysed from the damaged arrays."""
    path = _copy(tmp_path)
    cold = _summary(path, capsys)
    shutil.rmtree(_extra(path))
    folder = cache.entry_dir(str(path))
    manifest = cache._read_manifest(folder, cache.Manifest)
    name = "dur"
    array = folder / f"{name}.npy"
    st = array.stat()
    with open(array, "r+b") as handle:  # every duration's second byte changed in place
        handle.seek(st.st_size - manifest.files[name].shape[0] * 8)
        values = bytearray(handle.read())
        values[1::8] = bytes(b ^ 0x55 for b in values[1::8])
        handle.seek(st.st_size - len(values))
        handle.write(values)
    os.utime(array, ns=(st.st_atime_ns, st.st_mtime_ns))
    facts = manifest.files[name]
    manifest.files[name] = cache.FileFacts(
        facts.bytes,
        facts.crc32,
        facts.dtype,
        facts.shape,
        ino=facts.ino,
        mtime_ns=facts.mtime_ns,
        ctime_ns=array.stat().st_ctime_ns,
    )  # fmt: skip (its ctime cannot be put back: the manifest is made to agree with it)
    (folder / cache.MANIFEST).write_bytes(cache.manifest_bytes(manifest))
    assert cache.has_entry(str(path))  # every check but the CRCs passes
    assert _summary(path, capsys) == cold and analyses[0] == 2


def test_a_stored_text_is_kept_only_if_it_encodes_back_to_itself(tmp_path, cache_all, capsys):
    from kinetoscope.parser import load

    path = _copy(tmp_path)
    _summary(path, capsys)
    trace = load(str(path))
    assert not stored.save_summary_text(trace, '{"kinetoscope_summary": 1}', summary_json)
    assert not stored.save_summary_text(trace, "[1, 2]", summary_json)
    assert stored.load_summary_text(trace, summary_json) is not None  # the good one stays


@pytest.mark.parametrize(
    "trace", [pytest.param(f, id=f.name) for f in corpus_files()[::6]] or [None]
)
def test_warm_summaries_of_corpus_traces_are_byte_identical(trace, tmp_path, capsys, cache_all):
    if trace is None:
        pytest.skip("../shared/corpus is absent")
    cold = _summary(trace, capsys)
    assert _extra(trace).is_dir()
    assert _summary(trace, capsys) == cold
    arrays = cache.load_extra(
        _load_cached(trace), stored.SUMMARY_EXTRA, stored.code_version(summary_json)
    )
    assert arrays is not None and np.array_equal(
        arrays["text"], np.frombuffer(cold[:-1].encode(), np.uint8)
    )


def _load_cached(path):
    from kinetoscope.parser import load

    trace = load(str(path))
    assert trace.from_cache
    return trace


def _report(path, capsys, output: str) -> str:
    capsys.readouterr()
    assert run_summary(str(path), output=output, width=120) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("output", ["text", "md", "tsv"])
def test_the_other_formats_use_the_stored_document(tmp_path, capsys, cache_all, analyses, output):
    path = _copy(tmp_path)
    cold = _report(path, capsys, output)
    assert analyses[0] == 1
    assert _report(path, capsys, output) == cold and analyses[0] == 1
    # The text stored by the tables' run is the JSON summary's, byte for byte.
    warm_json = _summary(path, capsys)
    shutil.rmtree(cache.cache_root())
    assert warm_json == _summary(path, capsys) and analyses[0] == 2


def test_a_document_that_does_not_decode_to_itself_is_not_used_for_tables(
    tmp_path, capsys, cache_all, analyses
):
    """The stored text is kept for --json, but the tables are made from a computed document
    when decoding the text would not give the document back (a tuple, a NaN)."""
    from kinetoscope.parser import load

    path = _copy(tmp_path)
    cold = _report(path, capsys, "text")
    trace = load(str(path))
    stored_now = stored.load_summary(trace, summary_json)
    assert stored_now is not None and stored_now.document is not None
    other = dict(stored_now.document, devices=tuple(stored_now.document["devices"]))
    assert stored.save_summary_text(trace, stored_now.text, summary_json, other)
    assert stored.load_summary(trace, summary_json).document is None
    assert _report(path, capsys, "text") == cold and analyses[0] == 2


def test_the_version_is_the_code_that_made_the_document(tmp_path, monkeypatch):
    """One byte changed in any module of the analysis gives another version (a stored summary
    of the old code is then not used); the same code, the same version."""
    import kinetoscope.analysis

    here = stored._hash_code(summary_json)
    assert here is not None and here == stored._hash_code(summary_json)
    copy = tmp_path / "analysis"
    shutil.copytree(Path(kinetoscope.analysis.__file__).parent, copy)
    monkeypatch.setattr(kinetoscope.analysis, "__file__", str(copy / "__init__.py"))
    assert stored._hash_code(summary_json) == here
    sync = copy / "sync.py"
    sync.write_bytes(sync.read_bytes().replace(b"PAGEABLE", b"PAGEABLF", 1))
    assert stored._hash_code(summary_json) != here
    for module in copy.glob("*.py"):
        module.unlink()
    assert stored._hash_code(summary_json) is None  # no source: nothing is stored
