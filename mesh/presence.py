"""Which node owners hold a tenant: how a walk messages only the owners that can answer it.

A walk's wave asks every owner (scene shard, beacon set) for the neighbours of
its frontier. An owner that holds no node of the walk's tenant answers nothing,
so leaving it out changes no outcome, only the messages. :class:`OwnerPresence`
is a walker's view of which owners hold which tenants, kept as a **superset** of
the truth, so an owner it leaves out has nothing to give:

- an owner it has not heard from yet is *unknown* and always messaged;
- an owner tells every walker of a tenant it holds for the first time before the
  write or placement that brought it is acknowledged (``note``), and of every
  tenant it holds when it loads (so a restart after a crash between its commit and
  its telling repairs the view);
- a walker that starts asks each owner for its tenants (``begin_pull`` /
  ``end_pull``); what it is told while the answer travels is kept beside it.

Tenants are never taken out (an erased tenant costs a message until the next
restart), so the view only grows and a stale one only costs messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

Owner = tuple[str, int]  # (kind, index): ("scene_shard", 2), ("beacon_set", 0)


@dataclass(slots=True)
class OwnerPresence:
    """A walker's view of the tenants each owner holds; ``None`` for an owner not heard from."""

    _held: dict[Owner, set[str]] = field(default_factory=dict)
    _pulling: dict[Owner, set[str]] = field(default_factory=dict)  # told while a pull's answer travels

    def note(self, owner: Owner, tenants: Iterable[str]) -> None:
        """``owner`` holds ``tenants`` (it said so before acknowledging what brought them)."""
        tenants = set(tenants)
        if owner in self._pulling:
            self._pulling[owner] |= tenants
        held = self._held.get(owner)
        if held is not None:
            held |= tenants

    def begin_pull(self, owner: Owner) -> None:
        """A pull of ``owner``'s tenants starts: remember what it tells meanwhile."""
        self._pulling.setdefault(owner, set())

    def end_pull(self, owner: Owner, tenants: Iterable[str] | None) -> None:
        """The pull's answer (``None``: it failed, the owner stays unknown and always messaged)."""
        told = self._pulling.pop(owner, set())
        if tenants is None:
            return
        held = self._held.setdefault(owner, set())
        held |= set(tenants) | told

    def may_hold(self, owner: Owner, tenant_id: str) -> bool:
        """False only when ``owner`` is known to hold no node of ``tenant_id``."""
        held = self._held.get(owner)
        return held is None or tenant_id in held

    def known(self, owner: Owner) -> bool:
        return owner in self._held
