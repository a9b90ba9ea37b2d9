"""The composition root: settings in, a running :class:`~actors.facade.Memesh` out.

The only place that knows both the settings and the concrete parts (Ray or
in-process directory, embedding engine, storage URI).
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from actors.directory import Directory, InProcessDirectory
from actors.embedding import Embedder, make_engine
from actors.facade import Bucket, Memesh
from actors.memory_service import MemoryLimits
from actors.registry import RegistryConfig
from actors.scene_shard import ShardConfig
from cluster.settings import Settings
from mesh.ratelimit import BucketPolicy

log = logging.getLogger(__name__)

BOOTSTRAP_KEY_FILE = "bootstrap-admin.key"


def shard_configs(settings: Settings, dims: int) -> list[ShardConfig]:
    return [
        ShardConfig(
            storage_uri=settings.storage.lance_uri(),
            index=i,
            dims=dims,
            tuning=settings.scenes.tuning(),
            commit_window_s=settings.storage.commit_window_ms / 1000.0,
            commit_max_rows=settings.storage.commit_max_rows,
            optimize_every=settings.storage.optimize_every,
        )
        for i in range(settings.ray.scene_shards)
    ]


def registry_config(settings: Settings) -> RegistryConfig:
    return RegistryConfig(storage_uri=settings.storage.lance_uri(), optimize_every=settings.storage.optimize_every)


def build_directory(settings: Settings, dims: int) -> Directory:
    if settings.ray.in_process:
        return InProcessDirectory(shard_configs(settings, dims), registry_config(settings))
    from actors.ray_directory import RayDirectory, connect

    connect(settings.ray.address, settings.ray.namespace)
    return RayDirectory(settings.ray.namespace, shard_configs(settings, dims), registry_config(settings))


def rate_policies(settings: Settings) -> dict[str, BucketPolicy]:
    limits = settings.rate_limits
    return {
        Bucket.READ.value: BucketPolicy(limits.read.rate, limits.read.burst),
        Bucket.WRITE.value: BucketPolicy(limits.write.rate, limits.write.burst),
        Bucket.INBOX.value: BucketPolicy(limits.inbox.rate, limits.inbox.burst),
        Bucket.ADMIN.value: BucketPolicy(limits.admin.rate, limits.admin.burst),
    }


def build_memesh(settings: Settings) -> Memesh:
    engine = make_engine(settings.embedding.engine, settings.embedding.dims, settings.embedding.threads)
    settings.storage.data_dir.mkdir(parents=True, exist_ok=True)
    directory = build_directory(settings, engine.dims)
    limits = settings.limits
    return Memesh(
        directory,
        Embedder(engine, settings.embedding.max_batch),
        rate_policies(settings),
        recall_tuning=settings.recall.tuning(),
        limits=MemoryLimits(
            max_content_chars=limits.max_content_chars,
            max_batch_cells=limits.max_batch_cells,
            max_k=limits.max_k,
            max_text_chars=limits.max_text_chars,
            max_list=limits.max_list,
        ),
        principal_cache_ttl_s=settings.admin.principal_cache_ttl_s,
    )


async def start_core(memesh: Memesh, settings: Settings) -> Path | None:
    """What every start does before serving: check the deployment's shape against the
    data (ConfigInvalid when the shard count or embedding engine changed), then make
    sure the bootstrap admin exists. Returns the key file when this start wrote it."""
    wanted: dict[str, str | int] = {
        "scene_shards": settings.ray.scene_shards,
        "embedding_engine": memesh.embedder.name,
        "dims": memesh.embedder.dims,
    }
    await memesh.directory.registry().call("claim_deployment", wanted)
    return await write_bootstrap_key(memesh, settings.storage.data_dir)


async def write_bootstrap_key(memesh: Memesh, data_dir: Path) -> Path | None:
    """Create the bootstrap ServiceAdmin on first start and write its key (mode 0600).

    Returns the key file's path when this start created it; None when the
    admin already existed (a restart writes no new key).
    """
    plaintext = await memesh.identity.ensure_bootstrap_admin()
    if plaintext is None:
        return None
    return await asyncio.to_thread(_write_key_file, data_dir / BOOTSTRAP_KEY_FILE, plaintext)


def _write_key_file(path: Path, plaintext: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(plaintext + "\n")
    return path
