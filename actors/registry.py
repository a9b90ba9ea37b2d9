"""Registry: owns agents, their credentials, and sessions.

Guarantees:
- Single writer of ``registry_agents``, ``registry_sessions`` and
  ``registry_subjects`` (OIDC subject -> agent id); every mutation answers
  only after its row is committed.
- Keys are generated here (256 random bits) and only their hash is kept; a
  plaintext leaves this actor once, in the answer to issue or rotate.
- ``ensure_bootstrap_admin`` creates the bootstrap ServiceAdmin at most once
  for the life of the data: a restart finds the stored agent and makes none.
- Idempotent under Ray retries: issue takes the agent id from the caller, so a
  replayed issue returns the stored agent (without a plaintext).
- Sessions are bounded: an agent holds at most ``max_open_sessions`` open
  sessions (QuotaExceeded beyond), and closed sessions are deleted
  ``closed_session_max_age_s`` after they closed (the sweep runs every
  ``sweep_interval_s``), or sooner, oldest first, once the agent holds more
  than ``max_closed_sessions`` closed ones: a writer that opens and closes
  sessions in a loop keeps at most that many, not a day of them. A session
  deleted either way answers as one that never existed (NotFound).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

from actors.chores import LoadOnce, Periodic
from actors.codecs import agents_from_arrow, agents_to_arrow, sessions_from_arrow, sessions_to_arrow
from actors.group_commit import GroupCommitter
from actors.manifest import DeploymentManifest
from actors.resize import settle_layout
from actors.schemas import AGENT_SCHEMA, DESCRIPTOR_SCHEMA, MANIFEST_SCHEMA, SESSION_SCHEMA, SUBJECT_SCHEMA
from actors.storage import KeyedTable, LanceStore, StorageConfig
from mesh.errors import Conflict, NotFound, QuotaExceeded
from mesh.identity import SYSTEM_TENANT, Agent, AgentStatus, Principal, Role, format_key, hash_key, transition
from mesh.layout import Layout, Settled
from mesh.model import Session


@dataclass(frozen=True, slots=True)
class SubjectBinding:
    """A federated identity: the OIDC ``subject`` logs in to the console as ``agent_id``."""

    subject: str
    agent_id: str
    bound_at: datetime


def _subjects_to_arrow(bindings: list[SubjectBinding]) -> pa.Table:
    rows = [{"subject": b.subject, "agent_id": b.agent_id, "bound_at": b.bound_at} for b in bindings]
    return pa.Table.from_pylist(rows, schema=SUBJECT_SCHEMA)


@dataclass(frozen=True, slots=True)
class RegistryConfig:
    storage: StorageConfig
    max_open_sessions: int = 256  # per agent
    closed_session_max_age_s: float = 24 * 3600.0
    sweep_interval_s: float = 60.0
    max_closed_sessions: int = 256  # per agent; the oldest closed ones beyond it are deleted


class Registry:
    def __init__(self, config: RegistryConfig) -> None:
        self.config = config
        self._agents: dict[str, Agent] = {}
        self._by_hash: dict[str, str] = {}
        self._sessions: dict[str, Session] = {}
        self._agent_table: KeyedTable | None = None
        self._session_table: KeyedTable | None = None
        self._manifest: DeploymentManifest | None = None
        self._descriptor_table: KeyedTable | None = None
        self._descriptors: dict[str, str] = {}  # agent id -> descriptor JSON (inert metadata, never used for auth)
        self._ready_once = LoadOnce(self._load)
        window = config.storage.commit_window_s
        self._agent_commit: GroupCommitter[Agent] = GroupCommitter(self._flush_agents, window, 256, adaptive=True)
        self._session_commit: GroupCommitter[Session] = GroupCommitter(self._flush_sessions, window, 256, adaptive=True)
        self._subjects: dict[str, SubjectBinding] = {}  # federated subjects (see that section)
        self._subject_table: KeyedTable | None = None
        self._subject_commit: GroupCommitter[SubjectBinding] = GroupCommitter(self._flush_subjects, window, 256, adaptive=True)
        self._open_sessions: dict[str, int] = {}  # agent id -> open sessions
        self._closed: dict[str, dict[str, None]] = {}  # agent id -> its closed sessions' ids, oldest first
        self._forgotten: dict[str, Session] = {}  # closed sessions over an agent's cap: gone, deleted at the next sweep
        self._skipped = 0  # stored rows the last load could not decode
        self._sweeper = Periodic("closed-session sweep", self.sweep, config.sweep_interval_s)

    async def _ready(self) -> None:
        await self._ready_once()

    async def _load(self) -> None:
        store = await LanceStore.open(self.config.storage)
        self._agent_table = await store.keyed("registry_agents", AGENT_SCHEMA, "id")
        self._session_table = await store.keyed("registry_sessions", SESSION_SCHEMA, "id", identity="id")
        self._manifest = DeploymentManifest(await store.keyed("deployment_manifest", MANIFEST_SCHEMA, "key"))
        await self._load_subjects(store)
        await self._load_descriptors(store)
        agent_rows, session_rows = await self._agent_table.load(), await self._session_table.load()
        agents, sessions = agents_from_arrow(agent_rows), sessions_from_arrow(session_rows)
        self._skipped = agent_rows.num_rows - len(agents) + session_rows.num_rows - len(sessions)
        for agent in agents:
            self._put(agent)
        for session in sorted(sessions, key=lambda s: (s.closed_at is not None, s.closed_at or s.opened_at)):
            self._sessions[session.id] = session
            if session.open:
                self._open_sessions[session.agent_id] = self._open_sessions.get(session.agent_id, 0) + 1
            else:
                self._remember_closed(session)
        self._sweeper.start()

    def _put(self, agent: Agent) -> None:
        previous = self._agents.get(agent.id)
        if previous is not None:
            self._by_hash.pop(previous.key_hash, None)
        self._agents[agent.id] = agent
        self._by_hash[agent.key_hash] = agent.id

    async def close(self) -> None:
        await self._sweeper.stop()
        for committer in (self._agent_commit, self._session_commit, self._subject_commit):
            await committer.flush()

    async def settle_layout(self, wanted: dict[str, int], dims: int, running: bool, online: bool = False) -> Settled:
        """The partition layout the other actors start with, resized to ``wanted`` first when it differs
        (``actors.resize``). Asked before anything else of a new registry, so the resize, which switches
        the manifest, happens before this actor loads it: the manifest keeps one writer. ``online``: the
        partitioned actors were stopped by an online resize (this registry writes no layout row itself)."""
        return await settle_layout(self.config.storage, wanted, dims, running, online)

    async def layout_in_force(self, wanted: dict[str, int]) -> Layout:
        """The layout the manifest holds (``wanted``: the counts of a kind never recorded)."""
        await self._ready()
        assert self._manifest is not None
        return self._manifest.layout(await self._manifest.stored(), wanted)

    async def claim_deployment(self, wanted: dict[str, str | int]) -> str | None:
        """Record the deployment's shape on first start; refuse a different one later (``DeploymentManifest.claim``)."""
        await self._ready()
        assert self._manifest is not None
        return await self._manifest.claim(wanted)

    async def set_corpus_engine(self, engine: str) -> None:
        await self._ready()
        assert self._manifest is not None
        await self._manifest.set_corpus_engine(engine)

    async def remember_erasure_key(self, public_jwk: dict[str, Any]) -> list[dict[str, Any]]:
        await self._ready()
        assert self._manifest is not None
        return await self._manifest.remember_erasure_key(public_jwk)

    async def health(self) -> dict[str, int]:
        await self._ready()
        return {
            "agents": len(self._agents),
            "sessions": len(self._sessions),
            "skipped_rows": self._skipped,
            "pid": os.getpid(),
        }

    # -------------------------------------------------------------- credentials
    async def authenticate(self, key_hash: str) -> Principal | None:
        """The principal of an active agent holding this key, else None."""
        await self._ready()
        agent_id = self._by_hash.get(key_hash)
        agent = self._agents.get(agent_id) if agent_id else None
        if agent is None or agent.status is not AgentStatus.ACTIVE:
            return None
        return agent.principal()

    async def issue(
        self,
        agent_id: str,
        tenant_id: str,
        display_name: str,
        roles: frozenset[Role],
        read_scope: frozenset[str],
        now: datetime,
        bootstrap: bool = False,
    ) -> tuple[Agent, str | None]:
        await self._ready()
        existing = self._agents.get(agent_id)
        if existing is not None:
            return existing, None
        plaintext = format_key(secrets.token_urlsafe(32))
        agent = Agent(
            id=agent_id,
            tenant_id=tenant_id,
            display_name=display_name,
            roles=roles,
            status=AgentStatus.ACTIVE,
            key_hash=hash_key(plaintext),
            created_at=now,
            updated_at=now,
            read_scope=read_scope,
            bootstrap=bootstrap,
        )
        self._put(agent)
        await self._agent_commit.submit([agent])
        return agent, plaintext

    async def ensure_bootstrap_admin(self, agent_id: str, now: datetime) -> tuple[Agent, str | None]:
        """The bootstrap ServiceAdmin; a plaintext only when this call created it."""
        await self._ready()
        for agent in self._agents.values():
            if agent.bootstrap:
                return agent, None
        return await self.issue(
            agent_id, SYSTEM_TENANT, "bootstrap-admin", frozenset({Role.SERVICE_ADMIN}), frozenset(), now, bootstrap=True
        )

    async def get(self, agent_id: str) -> Agent:
        await self._ready()
        agent = self._agents.get(agent_id)
        if agent is None:
            raise NotFound("agent not found")
        return agent

    async def list_agents(self, tenant_id: str | None, after: str | None, limit: int) -> list[Agent]:
        """Agents in id order strictly after ``after``, optionally of one tenant."""
        await self._ready()
        ids = sorted(
            a.id
            for a in self._agents.values()
            if (tenant_id is None or a.tenant_id == tenant_id) and (after is None or a.id > after)
        )
        return [self._agents[i] for i in ids[:limit]]

    async def apply(self, agent_id: str, action: str, now: datetime) -> tuple[Agent, str | None]:
        """revoke | suspend | reinstate | rotate; rotate also returns the new plaintext."""
        agent = await self.get(agent_id)
        plaintext = None
        if action == "rotate":
            plaintext = format_key(secrets.token_urlsafe(32))
            updated = transition(agent, action, now, new_key_hash=hash_key(plaintext))
        else:
            if action == "reinstate" and agent.status is AgentStatus.ACTIVE:
                return agent, None
            updated = transition(agent, action, now)
        self._put(updated)
        await self._agent_commit.submit([updated])
        return updated, plaintext

    # ------------------------------------------------------- federated subjects
    # OIDC subject -> agent id, for the operator console's login (docs/console.md).
    # A subject names at most one agent; an agent may have several subjects.
    async def _load_subjects(self, store: LanceStore) -> None:
        self._subject_table = await store.keyed("registry_subjects", SUBJECT_SCHEMA, "subject")
        for row in (await self._subject_table.load()).to_pylist():
            at: datetime = row["bound_at"]
            at = at if at.tzinfo else at.replace(tzinfo=UTC)
            self._subjects[row["subject"]] = SubjectBinding(row["subject"], row["agent_id"], at)

    async def bind_subject(self, subject: str, agent_id: str, now: datetime) -> Agent:
        """Bind ``subject`` to ``agent_id``; answers once the binding is committed.

        Idempotent: binding the same pair again changes nothing. A subject bound to
        another agent that is not revoked is not moved (Conflict); one whose agent
        was revoked may be bound afresh. NotFound when ``agent_id`` is unknown.
        """
        agent = await self.get(agent_id)
        current = self._subjects.get(subject)
        if current is not None and current.agent_id == agent_id:
            return agent
        if current is not None:
            holder = self._agents.get(current.agent_id)
            if holder is not None and holder.status is not AgentStatus.REVOKED:
                raise Conflict("the subject is already bound to another agent")
        self._subjects[subject] = SubjectBinding(subject, agent_id, now)
        try:
            await self._subject_commit.submit([self._subjects[subject]])
        except BaseException:
            if current is None:
                self._subjects.pop(subject, None)
            else:
                self._subjects[subject] = current
            raise
        return agent

    async def resolve_subject(self, subject: str) -> Agent | None:
        """The agent ``subject`` is bound to, whatever its status; None when unbound."""
        await self._ready()
        binding = self._subjects.get(subject)
        return self._agents.get(binding.agent_id) if binding is not None else None

    async def ensure_bootstrap_subject(self, subject: str, agent_id: str, now: datetime) -> tuple[Agent, bool]:
        """The agent the bootstrap operator's subject logs in as, and whether this call created it.

        An unbound subject gets a new ServiceAdmin in the system tenant (its API key
        is discarded: a console-only identity). A bound subject is left as it is,
        whatever its agent's status, so a restart creates nothing and never undoes
        a revocation; except that a subject once bound to a lesser agent that has
        since been revoked is bound afresh to a new ServiceAdmin. A retry with the same ``agent_id`` makes no second agent.
        """
        await self._ready()
        current = self._subjects.get(subject)
        if current is not None:
            holder = await self.get(current.agent_id)
            squatted = Role.SERVICE_ADMIN not in holder.roles and holder.status is AgentStatus.REVOKED
            if not squatted:  # a lesser agent still active is refused by the caller (the start fails)
                return holder, False
        agent, _ = await self.issue(
            agent_id, SYSTEM_TENANT, "bootstrap-operator", frozenset({Role.SERVICE_ADMIN}), frozenset(), now
        )
        await self.bind_subject(subject, agent.id, now)
        return agent, True

    async def _flush_subjects(self, bindings: list[SubjectBinding]) -> None:
        assert self._subject_table is not None
        await self._subject_table.write(_subjects_to_arrow(bindings))

    # ------------------------------------------------------------------ sessions
    async def open_session(self, session: Session) -> Session:
        """Idempotent by id; QuotaExceeded when the agent already holds ``max_open_sessions`` open ones."""
        await self._ready()
        existing = self._sessions.get(session.id)
        if existing is not None:
            return existing
        if self._open_sessions.get(session.agent_id, 0) >= self.config.max_open_sessions:
            raise QuotaExceeded(f"an agent holds at most {self.config.max_open_sessions} open sessions: close one first")
        self._sessions[session.id] = session
        self._open_sessions[session.agent_id] = self._open_sessions.get(session.agent_id, 0) + 1
        try:
            await self._session_commit.submit([session])
        except Exception:  # not acknowledged: its place is given back (no one holds its id to close it)
            if self._sessions.get(session.id) is session:
                del self._sessions[session.id]
                self._open_sessions[session.agent_id] = max(0, self._open_sessions.get(session.agent_id, 0) - 1)
            raise
        return session

    async def get_session(self, session_id: str) -> Session:
        await self._ready()
        session = self._sessions.get(session_id)
        if session is None:
            raise NotFound("session not found")
        return session

    async def close_session(self, session_id: str, now: datetime) -> Session:
        session = await self.get_session(session_id)
        if not session.open:
            return session
        closed = replace(session, closed_at=now)
        self._sessions[session_id] = closed
        self._open_sessions[session.agent_id] = max(0, self._open_sessions.get(session.agent_id, 0) - 1)
        try:
            await self._session_commit.submit([closed])
        except Exception:  # not acknowledged: open as storage holds it, so a retry closes it for good
            if self._sessions.get(session_id) is closed:
                self._sessions[session_id] = session
                self._open_sessions[session.agent_id] = self._open_sessions.get(session.agent_id, 0) + 1
            raise
        self._remember_closed(closed)
        return closed

    def _remember_closed(self, session: Session) -> None:
        """Count ``session`` among its agent's closed ones; past the cap the oldest leaves memory at once and
        storage at the next sweep (a restart before that reloads it, and this cap drops it again)."""
        closed = self._closed.setdefault(session.agent_id, {})
        closed[session.id] = None
        while len(closed) > self.config.max_closed_sessions:
            oldest = next(iter(closed))
            del closed[oldest]
            forgotten = self._sessions.pop(oldest, None)
            if forgotten is not None:
                self._forgotten[oldest] = forgotten

    def _forget(self, session: Session) -> None:
        """Drop a deleted session from the per-agent bookkeeping."""
        if session.open:
            self._open_sessions[session.agent_id] = max(0, self._open_sessions.get(session.agent_id, 0) - 1)
            return
        closed = self._closed.get(session.agent_id)
        if closed is not None:
            closed.pop(session.id, None)
            if not closed:
                del self._closed[session.agent_id]

    async def sweep(self, now: datetime | None = None) -> int:
        """Delete the sessions closed more than ``closed_session_max_age_s`` ago; returns how many."""
        await self._ready()
        horizon = (now or datetime.now(UTC)) - timedelta(seconds=self.config.closed_session_max_age_s)
        old = sorted(s.id for s in self._sessions.values() if s.closed_at is not None and s.closed_at < horizon)
        for session_id in old:
            self._forget(self._sessions.pop(session_id))
        doomed = sorted({*old, *self._forgotten})
        if not doomed:
            return 0
        await self._session_commit.flush()
        assert self._session_table is not None
        await self._session_table.delete(doomed)
        for session_id in doomed:
            self._forgotten.pop(session_id, None)
        return len(doomed)

    # -------------------------------------------------------------- descriptors
    async def _load_descriptors(self, store: LanceStore) -> None:
        self._descriptor_table = await store.keyed("registry_descriptors", DESCRIPTOR_SCHEMA, "agent_id")
        for row in (await self._descriptor_table.load()).to_pylist():
            self._descriptors[row["agent_id"]] = row["descriptor"]

    async def get_descriptor(self, agent_id: str) -> str | None:
        """The stored descriptor (canonical JSON text) of ``agent_id``; None when it has none."""
        await self.get(agent_id)
        return self._descriptors.get(agent_id)

    async def put_descriptor(self, agent_id: str, descriptor_json: str) -> None:
        """Set or replace ``agent_id``'s descriptor; answers once the row is committed."""
        await self.get(agent_id)
        assert self._descriptor_table is not None
        row = pa.Table.from_pylist([{"agent_id": agent_id, "descriptor": descriptor_json}], schema=DESCRIPTOR_SCHEMA)
        await self._descriptor_table.write(row)
        self._descriptors[agent_id] = descriptor_json

    # ----------------------------------------------------------- data lifecycle
    async def erase_sessions(self, tenant_id: str, project_id: str | None, agent_id: str | None, dry_run: bool) -> int:
        """Erase the sessions of a project, or of an agent, in ``tenant_id`` (rows and old versions)."""
        await self._ready()
        doomed = sorted(
            s.id
            for s in [*self._sessions.values(), *self._forgotten.values()]  # a forgotten one's row is still stored
            if s.tenant_id == tenant_id
            and (project_id is None or s.project_id == project_id)
            and (agent_id is None or s.agent_id == agent_id)
        )
        if dry_run:
            return len(doomed)
        for session_id in doomed:
            if session_id in self._sessions:
                self._forget(self._sessions.pop(session_id))
            self._forgotten.pop(session_id, None)
        await self._session_commit.flush()
        assert self._session_table is not None
        await self._session_table.erase(doomed)  # idempotent: a repeat rewrites nothing it still finds
        return len(doomed)

    async def _flush_agents(self, agents: list[Agent]) -> None:
        assert self._agent_table is not None
        await self._agent_table.write(agents_to_arrow(agents))

    async def _flush_sessions(self, sessions: list[Session]) -> None:
        assert self._session_table is not None
        await self._session_table.write(sessions_to_arrow(sessions))
