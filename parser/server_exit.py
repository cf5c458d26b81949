"""Imported by the worker server (the forkserver) alone, as one of its preloaded modules: its
exit, once a load with `release` stops it, skips the interpreter's full garbage collections
over the modules it preloaded (numpy, msgspec, the parser: about half of that exit's time).
The workers it forks end with `os._exit`, so the handler never runs in them; nothing else
imports this module."""

import atexit
import gc

atexit.register(gc.freeze)
