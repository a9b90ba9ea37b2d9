"""Identity use cases: authenticate keys and run the agent lifecycle.

Guarantees:
- ``authenticate`` resolves a key to the principal of an *active* agent or
  raises Unauthorized; it never reads identity from anything but the key.
- The principal cache is invalidated synchronously by revoke, rotate and
  suspend before they return, so the very next request with the old key is
  refused. (Entries also expire after ``cache_ttl_s``, which bounds staleness
  when several head processes share one registry.)
- Authority follows spec section 5: a ProjectAdmin is confined to its tenant
  (reads outside it are 404, mutations 403); non-admins are refused before any
  dispatch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from actors.clock import Clock, IdSource
from actors.directory import Directory
from mesh.audit import AuditKind
from mesh.errors import Forbidden, Unauthorized, ValidationFailed
from mesh.identity import (
    Agent,
    Principal,
    check_can_issue,
    check_can_mutate_agent,
    check_can_read_agent,
    check_display_name,
    hash_key,
    looks_like_key,
    parse_roles,
    require_admin,
)

LIFECYCLE_ACTIONS = ("revoke", "suspend", "reinstate", "rotate")
_ACTION_KINDS = {
    "revoke": AuditKind.AGENT_REVOKED,
    "suspend": AuditKind.AGENT_SUSPENDED,
    "reinstate": AuditKind.AGENT_REINSTATED,
    "rotate": AuditKind.AGENT_ROTATED,
}


@dataclass(frozen=True, slots=True)
class IssuedCredential:
    agent: Agent
    plaintext_secret: str


class IdentityService:
    def __init__(
        self,
        directory: Directory,
        ids: IdSource,
        clock: Clock,
        cache_ttl_s: float = 30.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._dir = directory
        self._ids = ids
        self._clock = clock
        self._ttl = cache_ttl_s
        self._monotonic = monotonic
        self._cache: dict[str, tuple[Principal, float]] = {}
        self._hashes_of: dict[str, set[str]] = {}
        self._epoch = 0  # bumped by every invalidation; an answer fetched across a bump is not cached

    async def authenticate(self, key: str | None) -> Principal:
        if not key or not looks_like_key(key):
            raise Unauthorized("a valid x-service-key is required")
        key_hash = hash_key(key)
        cached = self._cache.get(key_hash)
        now = self._monotonic()
        if cached is not None and cached[1] > now:
            return cached[0]
        epoch = self._epoch
        principal: Principal | None = await self._dir.registry().call("authenticate", key_hash)
        if principal is None:
            self._cache.pop(key_hash, None)
            raise Unauthorized("a valid x-service-key is required")
        if epoch != self._epoch:
            return principal  # a lifecycle change ran meanwhile: answer, but do not cache what may be stale
        if len(self._cache) > 100_000:
            self._cache.clear()
            self._hashes_of.clear()
        self._cache[key_hash] = (principal, now + self._ttl)
        self._hashes_of.setdefault(principal.agent_id, set()).add(key_hash)
        return principal

    def _invalidate(self, agent_id: str) -> None:
        self._epoch += 1
        for key_hash in self._hashes_of.pop(agent_id, set()):
            self._cache.pop(key_hash, None)

    async def issue(
        self,
        actor: Principal,
        tenant_id: str,
        display_name: str,
        roles: list[str],
        read_scope: list[str] | None = None,
        credential_kind: str = "api_key_hash",
    ) -> IssuedCredential:
        require_admin(actor)
        if credential_kind != "api_key_hash":
            raise ValidationFailed("credential_kind must be api_key_hash")
        if not tenant_id or len(tenant_id) > 128 or not tenant_id.isprintable():
            raise ValidationFailed("tenant_id must be 1 to 128 printable characters")
        parsed = parse_roles(roles)
        name = check_display_name(display_name)
        check_can_issue(actor, tenant_id, parsed)
        agent, plaintext = await self._dir.registry().call(
            "issue", self._ids.new(), tenant_id, name, parsed, frozenset(read_scope or ()), self._clock()
        )
        assert plaintext is not None
        await self._audit(actor, AuditKind.AGENT_ISSUED, agent.id, "ok", {"tenant_id": tenant_id, "roles": sorted(roles)})
        return IssuedCredential(agent, plaintext)

    async def get(self, actor: Principal, agent_id: str) -> Agent:
        require_admin(actor)
        agent: Agent = await self._dir.registry().call("get", agent_id)
        check_can_read_agent(actor, agent)
        return agent

    async def list(self, actor: Principal, after: str | None, limit: int) -> tuple[list[Agent], bool]:
        require_admin(actor)
        if not 1 <= limit <= 500:
            raise ValidationFailed("limit must be between 1 and 500")
        tenant = None if actor.is_service_admin else actor.tenant_id
        agents: list[Agent] = await self._dir.registry().call("list_agents", tenant, after, limit + 1)
        return agents[:limit], len(agents) > limit

    async def apply(self, actor: Principal, agent_id: str, action: str) -> tuple[Agent, str | None]:
        """revoke, suspend, reinstate or rotate ``agent_id``; rotate returns the new plaintext."""
        require_admin(actor)
        if action not in LIFECYCLE_ACTIONS:
            raise ValidationFailed(f"unknown action {action!r}")
        target: Agent = await self._dir.registry().call("get", agent_id)
        try:
            check_can_mutate_agent(actor, target)
        except Forbidden:
            await self._audit(actor, AuditKind.AUTHZ_DENIED, agent_id, "denied", {"action": action})
            raise
        if target.bootstrap and action in ("revoke", "suspend") and target.id == actor.agent_id:
            raise Forbidden("the bootstrap admin cannot disable itself")
        self._invalidate(agent_id)
        try:
            agent, plaintext = await self._dir.registry().call("apply", agent_id, action, self._clock())
        finally:
            self._invalidate(agent_id)
        await self._audit(actor, _ACTION_KINDS[action], agent_id, "ok", {"action": action})
        return agent, plaintext

    async def _audit(self, actor: Principal, kind: AuditKind, target: str, outcome: str, detail: dict[str, Any]) -> None:
        """The synchronous audit row of a control-plane operation: the operation fails if it cannot be written."""
        await self._dir.audit_log().call("append", kind.value, actor.agent_id, actor.tenant_id, target, outcome, detail)

    async def verify_audit(self, actor: Principal) -> dict[str, Any]:
        """Recompute the whole audit chain from storage (admins only)."""
        require_admin(actor)
        result: dict[str, Any] = await self._dir.audit_log().call("verify")
        return result

    async def ensure_bootstrap_admin(self) -> str | None:
        """The bootstrap key's plaintext when this call created the admin, else None."""
        answer: tuple[Agent, str | None] = await self._dir.registry().call(
            "ensure_bootstrap_admin", self._ids.new(), self._clock()
        )
        return answer[1]
