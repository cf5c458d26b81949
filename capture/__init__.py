"""Run a program under torch.profiler and view the result (torch imported lazily)."""
