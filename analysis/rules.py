"""Triage rules (placeholder being written)."""

from __future__ import annotations


def run_rules(analysis):  # type: ignore[no-untyped-def]
    return []
