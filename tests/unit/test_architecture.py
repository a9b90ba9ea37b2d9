"""Imports point inward (docs/architecture.md): mesh <- actors, mesh <- head <- api, and cluster over all.

The head's use cases (``head``) never import an actor module, and actors never
import the head: they meet only at the typed seam of ``mesh.seam``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = {"mesh", "actors", "head", "api", "cluster", "memesh_proto"}
ALLOWED = {
    "mesh": {"mesh"},
    "actors": {"mesh", "actors"},
    "head": {"mesh", "head"},
    "api": {"mesh", "head", "api", "memesh_proto"},
    "cluster": FIRST_PARTY,
}
MESH_THIRD_PARTY = {"numpy", "pydantic", "Stemmer", "sklearn"}  # computation only: text analysis for mesh.lexical
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
    users = {
        p.relative_to(ROOT).as_posix()
        for pkg in ("mesh", "actors", "head", "api")
        for p in modules(pkg)
        if "ray" in imports_of(p)
    }
    assert users == {"actors/ray_directory.py"}


def test_only_storage_touches_lancedb() -> None:
    users = {p.relative_to(ROOT).as_posix() for pkg in ALLOWED for p in modules(pkg) if "lancedb" in imports_of(p)}
    assert users == {"actors/storage.py"}


def test_no_actor_method_is_named_by_a_string() -> None:
    """Every call across the seam is a typed method call (mesh.seam), so mypy and "find usages" see it."""
    offenders = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for pkg in (*ALLOWED, "tests", "bench")
        for path in modules(pkg)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in {"call", "remote"}
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
        and node.args[0].value.isidentifier()
        and node.args[0].value.islower()
    ]
    assert not offenders, offenders


def test_no_module_outgrows_450_lines() -> None:
    """Small modules (STYLE.md habit 7): tests, benches and generated code aside."""
    long = {
        p.relative_to(ROOT).as_posix(): n for pkg in ALLOWED for p in modules(pkg) if (n := len(p.read_text().splitlines())) > 450
    }
    assert not long, long


def test_no_timeout_is_asyncio_wait_for() -> None:
    """On Python 3.11, ``asyncio.wait_for`` returns its awaitable's result and drops a cancel that arrives
    as that awaitable completes (CPython gh-86296; 3.12 rebuilt it on ``asyncio.timeout``): a loop that
    only a cancel stops then runs on, and whoever awaits its end waits forever (a head's close did).
    Timeouts are ``async with asyncio.timeout(...)``, which keeps the cancel."""
    offenders = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for pkg in ALLOWED
        for path in modules(pkg)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr == "wait_for"
        and isinstance(node.value, ast.Name)
        and node.value.id == "asyncio"
    ]
    assert not offenders, offenders


def test_the_client_sdk_stands_alone() -> None:
    """sdk/ installs on its own: it imports none of the service's packages, only its three dependencies."""
    stdlib = set(sys.stdlib_module_names)
    for path in sorted((ROOT / "sdk" / "memesh_client").rglob("*.py")):
        names = imports_of(path) - {"__future__"} - stdlib
        assert names <= {"memesh_client", "httpx", "pydantic", "websockets"}, f"{path.name} imports {sorted(names)}"
