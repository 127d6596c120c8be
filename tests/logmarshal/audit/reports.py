"""What every audit path must leave behind: the tables, summary.json and a report with charts."""

from __future__ import annotations

import base64
import json
import re
import struct
from pathlib import Path

PNG = b"\x89PNG\r\n\x1a\n"


def assert_outputs(out: Path, engine: str) -> dict:
    """summary.json from ``engine`` and a report.html whose two charts are embedded PNGs."""
    summary = json.loads((out / "summary.json").read_text())
    assert summary["engine"] == engine
    html = (out / "report.html").read_text()
    assert html.startswith("<!doctype html>") and html.rstrip().endswith("</html>")
    images = re.findall(r"<img src='data:image/png;base64,([A-Za-z0-9+/=]+)'>", html)
    assert len(images) == 2  # the ownership timeline and the histograms
    for encoded in images:
        png = base64.b64decode(encoded, validate=True)
        assert png.startswith(PNG)
        width, height = struct.unpack(">II", png[16:24])  # IHDR: a real picture
        assert width > 200 and height > 100
    for heading in ("Ownership timeline", "Failovers", "Violations", "Verdicts"):
        assert f"<h2>{heading}" in html
    return summary
