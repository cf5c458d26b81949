"""kinetoscope: a keyboard-driven terminal viewer for PyTorch profiler traces.

From code: `kinetoscope.open(path)`, `kinetoscope.open_job(folder)`, `kinetoscope.diff(base,
new)` (docs/api.md); imported on first use, so `import kinetoscope` stays light."""

__version__ = "0.1.0"

_API = ("open", "open_job", "diff")


def __getattr__(name: str):  # PEP 562: the API is imported when first asked for
    if name in _API:
        from kinetoscope import api

        return getattr(api, name)
    raise AttributeError(f"module 'kinetoscope' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
