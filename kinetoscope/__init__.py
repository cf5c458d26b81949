"""kinetoscope: a keyboard-driven terminal viewer for PyTorch profiler traces."""

__version__ = "0.1.0"
