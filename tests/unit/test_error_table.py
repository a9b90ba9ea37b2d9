"""docs/errors.md is exactly what the one error mapping gives (docs/_scripts/error_table.py writes it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_error_table_matches_the_mapping() -> None:
    spec = importlib.util.spec_from_file_location("error_table", ROOT / "docs" / "_scripts" / "error_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "docs" / "errors.md").read_text() == module.render(), "run docs/_scripts/error_table.py"
