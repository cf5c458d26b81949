"""The single-trace viewer: its loader, view data, app and screens."""
