"""Agents, roles, credentials and the authority rules of spec section 5.

Keys are ``msh_`` + 43 url-safe characters (256 random bits). Only their
SHA-256 is stored: a key this long needs no slow hash, and a lookup by hash is
one dict probe. The plaintext exists only in the answer to issue and rotate.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from mesh.errors import Conflict, Forbidden, NotFound, ValidationFailed
from mesh.ids import is_new_name

KEY_PREFIX = "msh_"
DISPLAY_NAME_MAX = 64
SYSTEM_TENANT = "system"


class Role(StrEnum):
    SERVICE_ADMIN = "ServiceAdmin"
    PROJECT_ADMIN = "ProjectAdmin"
    WRITER = "Writer"
    READER = "Reader"


class AgentStatus(StrEnum):
    ACTIVE = "active"
    SUSPENDED = "suspended"
    REVOKED = "revoked"


ADMIN_ROLES = frozenset({Role.SERVICE_ADMIN, Role.PROJECT_ADMIN})
WRITE_ROLES = frozenset({Role.SERVICE_ADMIN, Role.PROJECT_ADMIN, Role.WRITER})


@dataclass(frozen=True, slots=True)
class Agent:
    """An agent identity. ``key_hash`` never leaves the registry."""

    id: str
    tenant_id: str
    display_name: str
    roles: frozenset[Role]
    status: AgentStatus
    key_hash: str
    created_at: datetime
    updated_at: datetime
    read_scope: frozenset[str] = frozenset()
    bootstrap: bool = False

    def principal(self) -> Principal:
        return Principal(agent_id=self.id, tenant_id=self.tenant_id, roles=self.roles, read_scope=self.read_scope)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling, resolved from the credential and never from a request body.

    ``read_scope`` is the set of readable projects; empty means the whole tenant.
    """

    agent_id: str
    tenant_id: str
    roles: frozenset[Role]
    read_scope: frozenset[str] = frozenset()

    @property
    def is_service_admin(self) -> bool:
        return Role.SERVICE_ADMIN in self.roles

    @property
    def is_admin(self) -> bool:
        return bool(self.roles & ADMIN_ROLES)

    @property
    def can_write(self) -> bool:
        return bool(self.roles & WRITE_ROLES)

    def can_read_project(self, project_id: str) -> bool:
        return not self.read_scope or project_id in self.read_scope


def hash_key(plaintext: str) -> str:
    """The stored form of a key."""
    return hashlib.sha256(plaintext.encode()).hexdigest()


def format_key(token: str) -> str:
    """A key from a url-safe random token (the caller supplies the randomness)."""
    return KEY_PREFIX + token


def looks_like_key(value: str) -> bool:
    return value.startswith(KEY_PREFIX) and 20 <= len(value) <= 256 and value.isascii()


def parse_roles(values: list[str]) -> frozenset[Role]:
    """Roles from their names; at least one, each one of :class:`Role`."""
    if not values:
        raise ValidationFailed("at least one role is required")
    try:
        return frozenset(Role(v) for v in values)
    except ValueError:
        raise ValidationFailed(f"roles must be among {', '.join(r.value for r in Role)}") from None


_JOINERS = frozenset("\u200c\u200d")  # zero-width non-joiner and joiner: emoji sequences and scripts need them


def check_display_name(name: str) -> str:
    """1 to 64 characters once the spaces at either end are cut, none of them a control character, an
    invisible format character (a bidirectional override makes ``exe.png`` read as ``gnp.exe`` in the
    console and the CLI's output; a zero-width space or a BOM makes a name that looks like another), a
    separator other than the space (a line or paragraph separator, a no-break space), a private-use
    character or a lone surrogate. The zero-width joiner and non-joiner stay: emoji and scripts are
    written with them."""
    name = name.strip(" ")
    if not name or len(name) > DISPLAY_NAME_MAX:
        raise ValidationFailed(f"display_name must be 1 to {DISPLAY_NAME_MAX} characters")
    if any(_unseen(c) for c in name):
        raise ValidationFailed(
            "display_name must not hold control, invisible format or private-use characters, nor separators other than the space"
        )
    return name


def _unseen(c: str) -> bool:
    kind = unicodedata.category(c)
    return (
        kind in ("Cc", "Co", "Cs", "Zl", "Zp") or (kind == "Cf" and c not in _JOINERS) or (kind == "Zs" and c != " ")
    )  # every bidirectional control (U+061C, U+200E/F, U+202A-E, U+2066-9) is a format character (Cf)


READ_SCOPE_MAX = 500
PROJECT_ID_MAX = 128


def check_read_scope(projects: Iterable[str]) -> frozenset[str]:
    """A read scope as stored: at most ``READ_SCOPE_MAX`` project ids of 1 to ``PROJECT_ID_MAX`` printable characters."""
    scope = frozenset(projects)
    if len(scope) > READ_SCOPE_MAX:
        raise ValidationFailed(f"read_scope holds at most {READ_SCOPE_MAX} projects")
    for project in scope:
        if not is_new_name(project, PROJECT_ID_MAX):
            raise ValidationFailed(
                f"each read_scope project is 1 to {PROJECT_ID_MAX} printable characters, not blank nor with a space at either end"
            )
    return scope


def require_writer(principal: Principal) -> None:
    if not principal.can_write:
        raise Forbidden("this agent may not write")


def require_admin(principal: Principal) -> None:
    """The coarse role gate of the control plane, before any dispatch."""
    if not principal.is_admin:
        raise Forbidden("an admin role is required")


def require_service_admin(principal: Principal) -> None:
    if not principal.is_service_admin:
        raise Forbidden("the ServiceAdmin role is required")


def check_can_read_agent(actor: Principal, target: Agent) -> None:
    """A ProjectAdmin reading outside its tenant sees a missing id (404)."""
    if not actor.is_service_admin and target.tenant_id != actor.tenant_id:
        raise NotFound("agent not found")


def check_can_mutate_agent(actor: Principal, target: Agent) -> None:
    """A ProjectAdmin mutating outside its tenant, or mutating a ServiceAdmin agent (which would let it
    rotate a service-wide key to itself), is refused (403, audited by the caller)."""
    if actor.is_service_admin:
        return
    if target.tenant_id != actor.tenant_id:
        raise Forbidden("the agent belongs to another tenant")
    if Role.SERVICE_ADMIN in target.roles:
        raise Forbidden("only a ServiceAdmin changes a ServiceAdmin agent")


def check_can_issue(actor: Principal, tenant_id: str, roles: frozenset[Role]) -> None:
    """Only a ServiceAdmin issues into another tenant or grants ServiceAdmin."""
    if actor.is_service_admin:
        return
    if tenant_id != actor.tenant_id:
        raise Forbidden("cannot issue agents in another tenant")
    if Role.SERVICE_ADMIN in roles:
        raise Forbidden("only a ServiceAdmin grants ServiceAdmin")


def transition(agent: Agent, action: str, now: datetime, new_key_hash: str | None = None) -> Agent:
    """The credential state machine: revoke (final; revoking again is a no-op), suspend, reinstate, rotate."""
    if agent.status is AgentStatus.REVOKED:
        if action == "revoke":
            return agent
        raise Conflict("the agent is revoked")
    if action == "revoke":
        return replace(agent, status=AgentStatus.REVOKED, updated_at=now)
    if action == "suspend":
        return replace(agent, status=AgentStatus.SUSPENDED, updated_at=now)
    if action == "reinstate":
        return replace(agent, status=AgentStatus.ACTIVE, updated_at=now)
    if action == "rotate":
        if new_key_hash is None:
            raise ValidationFailed("rotate needs a new key")
        return replace(agent, key_hash=new_key_hash, updated_at=now)
    raise ValidationFailed(f"unknown action {action!r}")
