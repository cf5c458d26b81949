import gzip
import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The real traces: $KINETOSCOPE_CORPUS, else ../shared/corpus beside the checkout
# (tests/corpus/fetch.py fetches them from their public repositories).
CORPUS = Path(os.environ.get("KINETOSCOPE_CORPUS") or REPO.parent / "shared" / "corpus")
SAMPLES = REPO / "sample_traces"


def corpus_files() -> list[Path]:
    return sorted(CORPUS.glob("*/*.json.gz")) if CORPUS.is_dir() else []


def corpus_params():
    files = corpus_files()
    if not files:
        return [pytest.param(None, marks=pytest.mark.skip(reason="../shared/corpus is absent"))]
    return [pytest.param(f, id=f"{f.parent.name}/{f.name}") for f in files]


@pytest.fixture(autouse=True)
def private_cache_dir(tmp_path_factory, monkeypatch):
    """Tests never read or write the user's model cache."""
    monkeypatch.setenv("KINETOSCOPE_CACHE_DIR", str(tmp_path_factory.mktemp("model-cache")))


@pytest.fixture(autouse=True)
def scratch_working_dir(tmp_path_factory, monkeypatch):
    """Tests run in a scratch folder: a key that saves a file (W, e) or a command that writes
    next to the current directory never leaves files in the checkout."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


def pytest_generate_tests(metafunc):
    """Tests marked `also_no_color` run twice: as configured, and with NO_COLOR=1."""
    if metafunc.definition.get_closest_marker("also_no_color") is not None:
        metafunc.parametrize("no_color", [False, True], ids=["colour", "NO_COLOR"], indirect=True)


@pytest.fixture(autouse=True)
def no_color(request, monkeypatch):
    """NO_COLOR=1 for the NO_COLOR run of an `also_no_color` test, and not for its colour run.
    Textual reads it when an App is created (and then draws every frame through its monochrome
    filter), so setting it before the test body makes the app built there honour it. Snapshots
    are pinned in colour: they run without it whatever the environment says; other tests run
    as the environment says (`NO_COLOR=1 pytest` runs them all without colour)."""
    param = getattr(request, "param", None)
    if param:
        monkeypatch.setenv("NO_COLOR", "1")
    elif param is not None or "snap_compare" in request.fixturenames:
        monkeypatch.delenv("NO_COLOR", raising=False)
    return bool(param)


@pytest.fixture
def write_trace(tmp_path):
    """Write a trace (a dict, list or raw bytes) to a file and return its path."""
    counter = iter(range(10**6))

    def write(content, name=None, compress=False):
        name = name or f"trace{next(counter)}.json"
        if isinstance(content, (dict, list)):
            content = json.dumps(content).encode()
        elif isinstance(content, str):
            content = content.encode()
        if compress:
            content = gzip.compress(content)
        path = tmp_path / name
        path.write_bytes(content)
        return path

    return write
