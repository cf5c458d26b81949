"""Run a program under torch.profiler and view the result (torch imported lazily).

`kinetoscope capture` and `kinetoscope demo` live in `cli.py`; `profile` is the Python API.
Importing this package does not import torch.
"""

from kinetoscope.capture.api import profile

__all__ = ["profile"]
