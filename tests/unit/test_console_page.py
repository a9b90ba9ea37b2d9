"""The browser console's files (api/console/static): no inline code, nothing from the service written as HTML.
Served under a strict CSP: tests/unit/test_admin_gate.py."""

from __future__ import annotations

import re
from pathlib import Path

STATIC = Path(__file__).resolve().parents[2] / "api" / "console" / "static"


def test_no_inline_code_and_no_html_from_data() -> None:
    page = (STATIC / "index.html").read_text()
    assert not re.search(r"<script(?![^>]*\bsrc=)", page), "an inline script"
    assert not re.search(r"\son[a-z]+\s*=", page), "an inline event handler"
    assert "style=" not in page, "an inline style"
    script = (STATIC / "console.js").read_text()
    assert "innerHTML" not in script and "outerHTML" not in script and "insertAdjacentHTML" not in script
    assert "eval(" not in script and "new Function" not in script
