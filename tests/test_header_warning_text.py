"""A header key is the trace's text: a warning about its value shows it cleaned, never raw."""

from __future__ import annotations

import json

from kinetoscope.parser import load


def test_a_header_key_with_a_newline_is_shown_cleaned(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [], "distributedInfo": {"\n\x1b[2J": 2**63}}))
    warnings = load(str(path), use_cache=False).warnings
    assert any("distributedInfo." in w for w in warnings)
    assert all("\n" not in w and "\x1b" not in w for w in warnings)
