"""The coarse role gate of the admin surfaces (the console's ``/admin/api`` and the gRPC ``AdminService``).

Guarantees:
- A caller that is not an admin is refused (Forbidden) before anything of its request is dispatched.
- Its refusals are in the audit log as ``AuthzDenied`` rows (``reason: role``), one a minute per agent
  and surface at most (``mesh.denials``): the first is durable before the refusal is answered, the ones
  after it within the minute are counted in the agent's next row (``detail.repeated``), or in a row written
  at the head's orderly close. A key sent to the admin surfaces at the Admin rate so writes about 1,440
  rows a day, not 1.7 million.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from head.audit import record
from mesh.audit import AuditKind
from mesh.denials import DenialLog
from mesh.identity import Principal, require_admin
from mesh.seam import Directory

log = logging.getLogger(__name__)


class RoleGate:
    def __init__(self, directory: Directory, monotonic: Callable[[], float] = time.monotonic, window_s: float = 60.0) -> None:
        self._dir = directory
        self._monotonic = monotonic
        self._denials = DenialLog(window_s)

    async def refuse_non_admin(self, actor: Principal, surface: str, target: str) -> None:
        """Return for an admin; else raise Forbidden, after its audit row (or its count) is kept."""
        if actor.is_admin:
            return
        now = self._monotonic()
        for (earlier, where, what), count in self._denials.pending(now):  # quiet pairs past the table's bound
            await self._row(earlier, where, what, count)
        repeated = self._denials.refused((actor.agent_id, surface), now, (actor, surface, target))
        if repeated is not None:
            await self._row(actor, surface, target, repeated)
        require_admin(actor)

    async def close(self) -> None:
        """Write the refusals still only counted (best effort: the audit log may be gone already)."""
        for (actor, surface, target), count in self._denials.pending():
            try:
                await self._row(actor, surface, target, count)
            except Exception:  # noqa: BLE001 - shutting down: say what was not written
                log.warning("%d refusals of agent %s at %s were not audited at shutdown", count, actor.agent_id, surface)

    async def _row(self, actor: Principal, surface: str, target: str, repeated: int) -> None:
        detail = {"action": surface, "reason": "role", **({"repeated": repeated} if repeated else {})}
        await record(self._dir, actor, AuditKind.AUTHZ_DENIED, target, "denied", detail)
