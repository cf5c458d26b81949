"""The top floor: the command line and one module per command."""
