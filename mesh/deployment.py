"""Where a deployment's actors are (:class:`DirectorySpec`) and the gate a head's calls to the partitioned ones pass
(:class:`Gate`): the two values of the actor seam (:mod:`mesh.seam`) that routing and online resizes change.

Guarantees: a spec is a value (picklable, hashable), and :meth:`DirectorySpec.owner` is the one routing rule of
requests and walks.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass, replace
from typing import Protocol

from mesh.layout import COUNT_KEYS, Layout
from mesh.sharding import Routes, shard_for


@dataclass(frozen=True, slots=True)
class DirectorySpec:
    """Where a deployment's actors are: its namespace, partition counts and the assignment of virtual
    partitions to them (picklable). ``routes`` is settled at start from the manifest; None routes by the
    implicit assignment of the counts (a deployment never resized, or a directory built in a test)."""

    namespace: str
    scene_shards: int
    beacon_sets: int
    inbox_shards: int
    embedders: int = 0  # the embedder pool (0: each head embeds with its own engine)
    walkers: int = 0  # the walker pool (0: writes start no walk); scene shard i walks on walker i % walkers
    routes: Routes | None = None
    epoch: int = 0  # online resizes so far: the partitioned actors of epoch e > 0 are named ``<kind>:<n>@<e>``

    def following(self, layout: Layout) -> DirectorySpec:
        """This deployment's spec with ``layout``'s counts, assignments and epoch."""
        counts = layout.counts
        return replace(
            self,
            scene_shards=counts["scene_shard"],
            beacon_sets=counts["beacon_set"],
            inbox_shards=counts["inbox_shard"],
            routes=layout.routes(),
            epoch=layout.epoch,
        )

    def owner(self, kind: str, key: str) -> int:
        """The index of the ``kind`` actor that holds ``key``: the one routing rule of requests."""
        if self.routes is None:
            return shard_for(key, getattr(self, COUNT_KEYS[kind]))
        return self.routes.owner(kind, key)


class Gate(Protocol):
    """A head's calls to the partitioned actors, held while an online resize moves their partitions
    (``actors.partition_gate``)."""

    @property
    def held(self) -> bool: ...

    def operation(self) -> AbstractAsyncContextManager[None]:
        """Many calls that must all see one layout (an erase, a reembed)."""
        ...

    def passing(self) -> AbstractContextManager[None]:
        """Calls made in this block pass a held gate."""
        ...

    async def hold(self, drain_s: float) -> bool: ...

    def release(self) -> None: ...
