"""Which scene shards a head knows to hold nothing of a tenant: how a search skips the shards that cannot answer.

A ``query`` or ``recall`` without a project filter asks every scene shard, and a shard that holds no node
of the caller's tenant answers nothing: leaving it out changes no answer, only the work (its hop, its
decode of the request, its turn on the event loop). :class:`ShardAbsence` is one head's view of those
shards, kept as a **subset** of the truth, so a shard it skips has nothing to give:

- a mark ``(shard, tenant)`` is learned only from that shard's own answer to a search ("I hold no node
  of this tenant": :meth:`learned`), and only if no change of presence reached the head between the
  search's send and its answer (:attr:`generation`), so an answer from before a write cannot outlive
  that write's announcement;
- a shard announces a tenant the first time it holds a node of it since it loaded, after the node is
  visible to its searches and before the write that brought it is acknowledged (``arrival_key``,
  through the head roster, whose ``publish`` returns once every live head applied it), and announces
  each load (``loaded_key``: a load may replay writes never acknowledged);
- the whole view is dropped when the partitions move or the head missed roster changes (:meth:`forget`);
- the head uses the marks only while its roster lease is fresh (the caller's check), the same fence as
  its principal cache: a head that lost the roster asks every shard.

Bounded: at most ``max_marks`` marks; past it the view starts again empty (a missing mark costs a message).
Pure state, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from mesh.roster import EVERYTHING

ARRIVED = "scene-shard-holds:"  # + "<shard>:<tenant>": the shard now holds a node of the tenant
LOADED = "scene-shard-loaded:"  # + "<shard>": the shard (re)loaded; what any head knew of it is void


def arrival_key(shard: int, tenant_id: str) -> str:
    return f"{ARRIVED}{shard}:{tenant_id}"


def loaded_key(shard: int) -> str:
    return f"{LOADED}{shard}"


@dataclass(slots=True)
class ShardAbsence:
    max_marks: int = 100_000
    generation: int = 0  # bumped by every change of presence this head applies
    _absent: set[tuple[int, str]] = field(default_factory=set)

    def __len__(self) -> int:
        return len(self._absent)

    def skip(self, shard: int, tenant_id: str) -> bool:
        """True only when ``shard`` said it holds nothing of ``tenant_id`` and has announced nothing since."""
        return (shard, tenant_id) in self._absent

    def learned(self, shard: int, tenants: Iterable[str], since: int) -> None:
        """``shard`` answered a search sent at generation ``since`` holding nothing of ``tenants``; kept
        only if no change of presence arrived since the search went out."""
        if since != self.generation:
            return
        for tenant_id in tenants:
            if len(self._absent) >= self.max_marks:
                self._absent.clear()
            self._absent.add((shard, tenant_id))

    def forget(self) -> None:
        """Drop every mark (the partitions moved, or this head missed roster changes)."""
        self.generation += 1
        self._absent.clear()

    def apply(self, changes: list[str]) -> list[str]:
        """Apply the roster's presence changes; the other changes, in order (``EVERYTHING`` is also applied:
        a head that missed changes may have missed announcements)."""
        others = []
        for change in changes:
            if change.startswith(ARRIVED):
                shard, _, tenant_id = change.removeprefix(ARRIVED).partition(":")
                self.generation += 1
                self._absent.discard((int(shard), tenant_id))
            elif change.startswith(LOADED):
                shard_index = int(change.removeprefix(LOADED))
                self.generation += 1
                self._absent = {(s, t) for s, t in self._absent if s != shard_index}
            else:
                if change == EVERYTHING:
                    self.forget()
                others.append(change)
        return others
