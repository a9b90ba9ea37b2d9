"""Identity use cases: authenticate keys and run the agent lifecycle.

Guarantees:
- ``authenticate`` resolves a key to the principal of an *active* agent or
  raises Unauthorized; it never reads identity from anything but the key.
- The principal cache is invalidated synchronously by revoke, rotate and
  suspend before they return, so the very next request with the old key is
  refused, at this head and at every other head of the deployment: the change
  is published through the head roster (``fence``, :mod:`head.roster_link`)
  and the call returns only when every live head has dropped it. A head that
  has lost the roster uses no cache at all (every request asks the registry)
  until it is back. Entries also expire after ``cache_ttl_s``.
- Authority follows spec section 5: a ProjectAdmin is confined to its tenant
  (reads outside it are 404, mutations 403); non-admins are refused before any
  dispatch.
- Every open stream of an agent is told at once when its credential changes
  (``watch``): revoke, suspend and rotate set the stream's event, and the
  stream re-checks its key before anything else is sent.
- A key that failed is remembered (a negative cache, cleared by any lifecycle
  change), so repeating a bogus key costs no registry round trip.
- Every lifecycle mutation (issue, revoke, suspend, reinstate, rotate, subject
  binding) writes its audit row before the change is made, and answers once
  both are durable: no change is ever visible without its row. A change that
  then fails for good adds a row with outcome ``failed``.
- Federated subjects (the console's OIDC logins): ``principal_for_subject``
  answers only for an *active* agent and is asked afresh on every console
  request, so revoking or suspending the agent ends its console sessions at
  once. Only a ServiceAdmin binds a subject to a ServiceAdmin agent; the
  configured bootstrap subject can only ever be bound to a ServiceAdmin. Login
  rows (AuthSuccess / AuthFailure) hold subjects, agent ids and reasons, never
  a code, token, cookie or client secret.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from head.audit import record
from mesh.audit import AuditKind
from mesh.errors import Conflict, Forbidden, MemeshError, Unauthorized, ValidationFailed
from mesh.identity import (
    Agent,
    AgentStatus,
    Principal,
    Role,
    check_can_issue,
    check_can_mutate_agent,
    check_can_read_agent,
    check_display_name,
    check_read_scope,
    hash_key,
    looks_like_key,
    parse_roles,
    require_admin,
    require_service_admin,
    transition,
)
from mesh.ids import Clock, IdSource, is_new_name
from mesh.roster import EVERYTHING
from mesh.seam import Directory

log = logging.getLogger(__name__)
NEGATIVE_CACHE = 10_000
NEGATIVE_TTL_S = 60.0
VOUCHED = 100_000  # key hashes this head saw authenticate, remembered for VOUCHED_S (``vouched``)
VOUCHED_S = 86_400.0

LIFECYCLE_ACTIONS = ("revoke", "suspend", "reinstate", "rotate")
_ACTION_KINDS = {
    "revoke": AuditKind.AGENT_REVOKED,
    "suspend": AuditKind.AGENT_SUSPENDED,
    "reinstate": AuditKind.AGENT_REINSTATED,
    "rotate": AuditKind.AGENT_ROTATED,
}
SUBJECT_MAX = 255  # OpenID Connect Core 1.0, section 2: `sub` is at most 255 ASCII characters
ANONYMOUS = "anonymous"  # the actor of a failed login whose subject is not known


def check_subject(subject: str) -> str:
    """An OIDC subject as stored: 1 to 255 printable characters (ValidationFailed otherwise)."""
    if not subject or len(subject) > SUBJECT_MAX or not subject.isprintable():
        raise ValidationFailed(f"an OIDC subject is 1 to {SUBJECT_MAX} printable characters")
    return subject


@dataclass(frozen=True, slots=True)
class IssuedCredential:
    agent: Agent
    plaintext_secret: str


class CacheFence(Protocol):
    """What makes this head's principal cache safe beside other heads (:class:`head.roster_link.RosterLink`)."""

    def fresh(self) -> bool: ...

    async def publish(self, agent_id: str) -> None: ...


class _AloneFence:
    """One head, nobody to tell: the cache is always safe."""

    def fresh(self) -> bool:
        return True

    async def publish(self, agent_id: str) -> None:
        return None


class IdentityService:
    def __init__(
        self,
        directory: Directory,
        ids: IdSource,
        clock: Clock,
        cache_ttl_s: float = 30.0,
        monotonic: Callable[[], float] = time.monotonic,
        bootstrap_subject: str | None = None,
    ) -> None:
        """``bootstrap_subject`` (``admin.bootstrap_oidc_subject``) is reserved for a ServiceAdmin."""
        self._dir = directory
        self._ids = ids
        self._clock = clock
        self._ttl = cache_ttl_s
        self._monotonic = monotonic
        self._bootstrap_subject = bootstrap_subject
        self._cache: dict[str, tuple[Principal, float]] = {}
        self._hashes_of: dict[str, set[str]] = {}
        self._refused: OrderedDict[str, float] = OrderedDict()  # key hash -> until (monotonic)
        self._vouched: OrderedDict[str, float] = OrderedDict()  # key hash that authenticated here -> until
        self._watchers: dict[str, set[asyncio.Event]] = {}
        self._epoch = 0  # bumped by every invalidation; an answer fetched across a bump is not cached
        self.fence: CacheFence = _AloneFence()

    def cached(self, key: str | None) -> Principal | None:
        """The principal of ``key`` when this head holds it (no registry call), else None."""
        if not key or not looks_like_key(key):
            return None
        if not self.fence.fresh():
            return None
        cached = self._cache.get(hash_key(key))
        return cached[0] if cached is not None and cached[1] > self._monotonic() else None

    def vouched(self, key: str | None) -> bool:
        """True when ``key`` authenticated at this head within ``VOUCHED_S`` and has not been refused since: its
        lookup is not a guess, so a flood of bad keys from its address does not hold it back (the facade)."""
        if not key or not looks_like_key(key):
            return False
        until = self._vouched.get(hash_key(key))
        return until is not None and until > self._monotonic()

    async def authenticate(self, key: str | None) -> Principal:
        if not key or not looks_like_key(key):
            raise Unauthorized("a valid x-service-key is required")
        key_hash = hash_key(key)
        now = self._monotonic()
        trusted = self.fence.fresh()
        cached = self._cache.get(key_hash) if trusted else None
        if cached is not None and cached[1] > now:
            return cached[0]
        refused = self._refused.get(key_hash) if trusted else None
        if refused is not None and refused > now:
            raise Unauthorized("a valid x-service-key is required")
        epoch = self._epoch if trusted else -1  # a fenced head caches nothing
        principal: Principal | None = await self._dir.registry().authenticate(key_hash)
        if principal is None:
            self._cache.pop(key_hash, None)
            self._vouched.pop(key_hash, None)
            if epoch == self._epoch:
                self._refused[key_hash] = now + NEGATIVE_TTL_S
                self._refused.move_to_end(key_hash)
                while len(self._refused) > NEGATIVE_CACHE:
                    self._refused.popitem(last=False)
            raise Unauthorized("a valid x-service-key is required")
        self._vouched[key_hash] = now + VOUCHED_S
        self._vouched.move_to_end(key_hash)
        while len(self._vouched) > VOUCHED:
            self._vouched.popitem(last=False)
        if epoch != self._epoch:
            return principal  # a lifecycle change ran meanwhile: answer, but do not cache what may be stale
        if len(self._cache) > 100_000:
            self._cache.clear()
            self._hashes_of.clear()
        self._cache[key_hash] = (principal, now + self._ttl)
        self._hashes_of.setdefault(principal.agent_id, set()).add(key_hash)
        return principal

    def changed_elsewhere(self, agent_ids: list[str]) -> None:
        """Another head changed these agents' credentials or status (``"*"``: possibly anyone's)."""
        for agent_id in agent_ids:
            if agent_id == EVERYTHING:
                self._epoch += 1
                self._cache.clear()
                self._hashes_of.clear()
                self._refused.clear()
                for events in self._watchers.values():
                    for event in events:
                        event.set()
            else:
                self._invalidate(agent_id)

    def _invalidate(self, agent_id: str) -> None:
        self._epoch += 1
        self._refused.clear()  # a reinstated agent's key must work on the next request
        for key_hash in self._hashes_of.pop(agent_id, set()):
            self._cache.pop(key_hash, None)
        for event in self._watchers.get(agent_id, ()):
            event.set()

    @contextmanager
    def watch(self, agent_id: str) -> Iterator[asyncio.Event]:
        """An event set whenever ``agent_id``'s credential or status changes on this head (revoke,
        suspend, rotate, reinstate) or its console sessions end: an open stream waits on it and then
        checks its credential again before it sends anything else. Clear it after each check."""
        event = asyncio.Event()
        self._watchers.setdefault(agent_id, set()).add(event)
        try:
            yield event
        finally:
            watchers = self._watchers.get(agent_id)
            if watchers is not None:
                watchers.discard(event)
                if not watchers:
                    del self._watchers[agent_id]

    def nudge(self, agent_id: str) -> None:
        """Make every open stream of ``agent_id`` check its credential again now (a logout, say)."""
        for event in self._watchers.get(agent_id, ()):
            event.set()

    async def issue(
        self,
        actor: Principal,
        tenant_id: str,
        display_name: str,
        roles: list[str],
        read_scope: list[str] | None = None,
        credential_kind: str = "api_key_hash",
        oidc_subject: str | None = None,
    ) -> IssuedCredential:
        """A new agent and its key (returned once). With ``oidc_subject``, that subject then
        logs in to the console as the agent (a SubjectBound row follows the AgentIssued row)."""
        require_admin(actor)
        if credential_kind != "api_key_hash":
            raise ValidationFailed("credential_kind must be api_key_hash")
        subject = check_subject(oidc_subject) if oidc_subject is not None else None
        if not is_new_name(tenant_id, 128):
            raise ValidationFailed("tenant_id must be 1 to 128 printable characters, not blank nor with a space at either end")
        parsed = parse_roles(roles)
        name = check_display_name(display_name)
        scope = check_read_scope(read_scope or ())
        try:
            check_can_issue(actor, tenant_id, parsed)
        except Forbidden:
            await self._audit(actor, AuditKind.AUTHZ_DENIED, tenant_id, "denied", {"action": "issue", "roles": sorted(roles)})
            raise
        if subject is not None:
            # Before issuing: a refused bind must not leave an agent behind.
            await self._check_subject_free(actor, subject, Role.SERVICE_ADMIN in parsed)
        agent_id = self._ids.new()
        await self._audit(actor, AuditKind.AGENT_ISSUED, agent_id, "ok", {"tenant_id": tenant_id, "roles": sorted(roles)})
        agent, plaintext = await self._after_row(
            actor,
            AuditKind.AGENT_ISSUED,
            agent_id,
            self._dir.registry().issue(agent_id, tenant_id, name, parsed, scope, self._clock()),
        )
        assert plaintext is not None
        if subject is not None:
            await self._audit(actor, AuditKind.SUBJECT_BOUND, agent.id, "ok", {"subject": subject})
            await self._after_row(
                actor,
                AuditKind.SUBJECT_BOUND,
                agent.id,
                self._dir.registry().bind_subject(subject, agent.id, self._clock()),
            )
        return IssuedCredential(agent, plaintext)

    async def _after_row(self, actor: Principal, kind: AuditKind, target: str, change: Any) -> Any:
        """Make ``change`` (an awaitable) whose row is already durable; if it fails for good, say so in a
        second row (best effort) and raise."""
        try:
            return await change
        except MemeshError as exc:
            try:
                await self._audit(actor, kind, target, "failed", {"error": str(exc.code)})
            except MemeshError:
                log.error("the failure row of %s on %s could not be written", kind.value, target)
            raise

    async def get(self, actor: Principal, agent_id: str) -> Agent:
        require_admin(actor)
        agent: Agent = await self._dir.registry().get(agent_id)
        check_can_read_agent(actor, agent)
        return agent

    async def list(self, actor: Principal, after: str | None, limit: int) -> tuple[list[Agent], bool]:
        require_admin(actor)
        if not 1 <= limit <= 500:
            raise ValidationFailed("limit must be between 1 and 500")
        tenant = None if actor.is_service_admin else actor.tenant_id
        agents: list[Agent] = await self._dir.registry().list_agents(tenant, after, limit + 1)
        return agents[:limit], len(agents) > limit

    async def apply(self, actor: Principal, agent_id: str, action: str) -> tuple[Agent, str | None]:
        """revoke, suspend, reinstate or rotate ``agent_id``; rotate returns the new plaintext."""
        require_admin(actor)
        if action not in LIFECYCLE_ACTIONS:
            raise ValidationFailed(f"unknown action {action!r}")
        target: Agent = await self._dir.registry().get(agent_id)
        try:
            check_can_mutate_agent(actor, target)
        except Forbidden:
            await self._audit(actor, AuditKind.AUTHZ_DENIED, agent_id, "denied", {"action": action})
            raise
        mine = target.id == actor.agent_id  # the bootstrap admin, or the operator its subject logs in as, disabling itself
        bound = await self._dir.registry().resolve_subject(self._bootstrap_subject) if mine and self._bootstrap_subject else None
        itself = mine and (target.bootstrap or target.id == getattr(bound, "id", None))
        if itself and action in ("revoke", "suspend"):
            await self._audit(actor, AuditKind.AUTHZ_DENIED, agent_id, "denied", {"action": action, "reason": "self"})
            raise Forbidden("the bootstrap admin or operator cannot disable itself")
        transition(target, action, self._clock(), new_key_hash="-" * 64)  # refused transitions fail before the row
        await self._audit(actor, _ACTION_KINDS[action], agent_id, "ok", {"action": action})
        self._invalidate(agent_id)
        try:
            change = self._dir.registry().apply(agent_id, action, self._clock())
            agent, plaintext = await self._after_row(actor, _ACTION_KINDS[action], agent_id, change)
        finally:
            self._invalidate(agent_id)
            await self.fence.publish(agent_id)  # every other head has dropped it before this returns
        return agent, plaintext

    # ------------------------------------------------------- federated subjects
    async def _check_subject_free(self, actor: Principal, subject: str, to_service_admin: bool) -> None:
        """Conflict when another live agent holds ``subject``; Forbidden (audited) for the bootstrap
        subject bound to anything but a ServiceAdmin (a squatter would stop the next start or take the
        first operator's logins)."""
        if subject == self._bootstrap_subject and not (to_service_admin and actor.is_service_admin):
            await self._audit(actor, AuditKind.AUTHZ_DENIED, subject, "denied", {"action": "bind_subject", "reason": "reserved"})
            raise Forbidden("this subject is reserved for the bootstrap operator")
        holder: Agent | None = await self._dir.registry().resolve_subject(subject)
        if holder is not None and holder.status is not AgentStatus.REVOKED:
            raise Conflict("the subject is already bound to another agent")

    async def bind_subject(self, actor: Principal, subject: str, agent_id: str) -> Agent:
        """Let ``subject`` log in to the console as ``agent_id``; idempotent, audited (SubjectBound).

        Tenant rules as for the lifecycle: a ProjectAdmin binds only in its own
        tenant (403 and an AuthzDenied row otherwise) and never to a ServiceAdmin
        agent. A subject bound to another agent that is not revoked is not moved
        (Conflict).
        """
        require_admin(actor)
        subject = check_subject(subject)
        target: Agent = await self._dir.registry().get(agent_id)
        try:
            check_can_mutate_agent(actor, target)
            if Role.SERVICE_ADMIN in target.roles:
                require_service_admin(actor)
        except Forbidden:
            await self._audit(actor, AuditKind.AUTHZ_DENIED, agent_id, "denied", {"action": "bind_subject"})
            raise
        if subject == self._bootstrap_subject:
            await self._check_subject_free(actor, subject, Role.SERVICE_ADMIN in target.roles)
        await self._audit(actor, AuditKind.SUBJECT_BOUND, agent_id, "ok", {"subject": subject})
        change = self._dir.registry().bind_subject(subject, agent_id, self._clock())
        agent: Agent = await self._after_row(actor, AuditKind.SUBJECT_BOUND, agent_id, change)
        return agent

    async def principal_for_subject(self, subject: str) -> Principal | None:
        """The principal ``subject`` logs in as, only while its agent is active; None otherwise.

        Never cached: each console request asks the registry, so a revoke or
        suspend takes effect on the very next request.
        """
        try:
            subject = check_subject(subject)
        except ValidationFailed:
            return None
        agent: Agent | None = await self._dir.registry().resolve_subject(subject)
        if agent is None or agent.status is not AgentStatus.ACTIVE:
            return None
        if subject == self._bootstrap_subject and Role.SERVICE_ADMIN not in agent.roles:
            return None  # squatted (by data written before the subject was reserved): never log in as the squatter
        return agent.principal()

    async def record_login(
        self, subject: str | None, outcome: str, detail: dict[str, Any], principal: Principal | None = None
    ) -> None:
        """The audit row of one console login: AuthSuccess when ``outcome`` is "ok" (``principal``
        required: the agent logged in as), else an AuthFailure row (outcome "denied") with the unresolved subject
        (or "anonymous" when none is known) as the actor. ``detail`` holds reasons and ids only,
        never a code, token or secret. Durable before this returns; raises if it cannot be written.
        """
        target = subject or ANONYMOUS
        facts = {"method": "oidc", **detail}
        if outcome == "ok":
            if principal is None:
                raise ValueError("a successful login needs the principal it resolved to")
            await self._audit(principal, AuditKind.AUTH_SUCCESS, target, "ok", facts)
            return
        await self._dir.audit_log().append(AuditKind.AUTH_FAILURE.value, target, "", target, "denied", facts)

    async def ensure_bootstrap_subject(self, subject: str) -> bool:
        """Bind ``admin.bootstrap_oidc_subject`` to a ServiceAdmin at start-up; True when this call created it.

        Idempotent across restarts: a subject already bound is left alone (and
        writes no row); a new binding writes one SubjectBound row.
        """
        subject = check_subject(subject)
        agent, created = await self._dir.registry().ensure_bootstrap_subject(subject, self._ids.new(), self._clock())
        if Role.SERVICE_ADMIN not in agent.roles:
            # Bound to a lesser agent before the subject was reserved: serve anyway, but the subject does
            # not log in (principal_for_subject) until that agent is revoked and the next start rebinds it.
            unbound = "admin.bootstrap_oidc_subject is bound to agent %s, no ServiceAdmin: it logs in once that agent is revoked"
            log.error(unbound + " (the next start then binds it to a new ServiceAdmin)", agent.id)
            return False
        if created:
            await self._audit(agent.principal(), AuditKind.SUBJECT_BOUND, agent.id, "ok", {"subject": subject, "bootstrap": True})
        return bool(created)

    async def _audit(self, actor: Principal, kind: AuditKind, target: str, outcome: str, detail: dict[str, Any]) -> None:
        """The synchronous audit row of a control-plane operation: the operation fails if it cannot be written."""
        await record(self._dir, actor, kind, target, outcome, detail)

    async def verify_audit(self, actor: Principal) -> dict[str, Any]:
        """Recompute the whole audit chain from storage (a ServiceAdmin's: the chain, and its row count, span
        every tenant; a ProjectAdmin's try is 403 and an ``AuthzDenied`` row)."""
        require_admin(actor)
        if not actor.is_service_admin:
            await self._audit(actor, AuditKind.AUTHZ_DENIED, "audit", "denied", {"action": "verify"})
            raise Forbidden("only a ServiceAdmin verifies the audit chain: it spans every tenant")
        return dict(await self._dir.audit_log().verify())

    async def ensure_bootstrap_admin(self) -> str | None:
        """The bootstrap key's plaintext when this call created the admin, else None."""
        answer: tuple[Agent, str | None] = await self._dir.registry().ensure_bootstrap_admin(self._ids.new(), self._clock())
        return answer[1]
