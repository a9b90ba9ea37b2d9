"""Which shard holds a project: the partition key and the one mapping from it to a shard number.

A partition is keyed by ``(tenant, project)``, so every cell and scene of a
project lives on one shard. Guarantees: :func:`shard_for` is a stable hash
(BLAKE2b, never Python's salted ``hash``), so every process, on every restart,
sends the same key to the same shard for a given shard count.
"""

from __future__ import annotations

import hashlib


def shard_for(key: str, shards: int) -> int:
    """The one mapping from a partition key to a shard number (stable across processes)."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def partition_key(tenant_id: str, project_id: str) -> str:
    return f"{tenant_id}\x1f{project_id}"
