"""The diff viewer."""
