"""The Ray tier's deployment: one memesh core (hash engine, two scene shards) on the session's Ray, per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from actors.ray_directory import RayDirectory
from cluster.compose import build_memesh
from cluster.settings import Settings
from head.facade import Memesh


@pytest.fixture
async def core(ray_address: str, tmp_path: Path) -> AsyncIterator[Memesh]:
    settings = Settings(
        ray={"address": ray_address, "namespace": f"test-{uuid.uuid4().hex[:8]}", "scene_shards": 2},
        embedding={"engine": "hash"},
        storage={"data_dir": tmp_path / "data", "commit_window_ms": 1},
    )
    memesh = build_memesh(settings)
    assert isinstance(memesh.directory, RayDirectory)
    yield memesh
    await memesh.close()
