"""Imports point inward: mesh <- actors <- api <- cluster (DESIGN.md section 2)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = {"mesh", "actors", "api", "cluster", "memesh_proto"}
ALLOWED = {
    "mesh": {"mesh"},
    "actors": {"mesh", "actors"},
    "api": {"mesh", "actors", "api", "memesh_proto"},
    "cluster": FIRST_PARTY,
}
MESH_THIRD_PARTY = {"numpy", "pydantic"}
MESH_FORBIDDEN_STDLIB = {"random", "secrets", "time", "os", "socket", "asyncio", "threading", "subprocess"}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_first_party_imports_point_inward(package: str) -> None:
    for path in modules(package):
        wrong = (imports_of(path) & FIRST_PARTY) - ALLOWED[package]
        assert not wrong, f"{path.relative_to(ROOT)} imports {sorted(wrong)}"


def test_the_domain_core_imports_no_runtime_storage_or_transport() -> None:
    stdlib = set(sys.stdlib_module_names)
    for path in modules("mesh"):
        names = imports_of(path) - {"__future__"}
        third_party = {n for n in names if n not in stdlib and n not in FIRST_PARTY}
        assert third_party <= MESH_THIRD_PARTY, f"{path.name} imports {sorted(third_party - MESH_THIRD_PARTY)}"
        assert not names & MESH_FORBIDDEN_STDLIB, f"{path.name} imports {sorted(names & MESH_FORBIDDEN_STDLIB)}"
        source = path.read_text()
        assert ".now(" not in source and "uuid4(" not in source, f"{path.name} reads a clock or randomness"


def test_only_ray_directory_touches_ray() -> None:
    users = {p.relative_to(ROOT).as_posix() for pkg in ("mesh", "actors", "api") for p in modules(pkg) if "ray" in imports_of(p)}
    assert users == {"actors/ray_directory.py"}


def test_only_storage_touches_lancedb() -> None:
    users = {p.relative_to(ROOT).as_posix() for pkg in ALLOWED for p in modules(pkg) if "lancedb" in imports_of(p)}
    assert users == {"actors/storage.py"}
