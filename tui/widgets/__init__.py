"""Widgets shared by every viewer: the timeline, the table, rendering, search."""
