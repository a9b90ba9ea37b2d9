"""Registry: owns agents, their credentials, and sessions.

Guarantees:
- Single writer of ``registry_agents`` and ``registry_sessions``; every
  mutation answers only after its row is committed.
- Keys are generated here (256 random bits) and only their hash is kept; a
  plaintext leaves this actor once, in the answer to issue or rotate.
- ``ensure_bootstrap_admin`` creates the bootstrap ServiceAdmin at most once
  for the life of the data: a restart finds the stored agent and makes none.
- Idempotent under Ray retries: issue takes the agent id from the caller, so a
  replayed issue returns the stored agent (without a plaintext).
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, replace
from datetime import datetime

import pyarrow as pa

from actors.codecs import AGENT_SCHEMA, SESSION_SCHEMA, agents_from_arrow, agents_to_arrow, sessions_from_arrow, sessions_to_arrow
from actors.storage import GroupCommitter, LanceStore, LoadOnce, RowTable
from mesh.errors import ConfigInvalid, NotFound
from mesh.identity import SYSTEM_TENANT, Agent, AgentStatus, Principal, Role, format_key, hash_key, transition
from mesh.model import Session

MANIFEST_SCHEMA = pa.schema([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.string(), nullable=False)])


@dataclass(frozen=True, slots=True)
class RegistryConfig:
    storage_uri: str
    commit_window_s: float = 0.001
    optimize_every: int = 64
    cache_mb: int = 32  # LanceDB index and metadata cache bounds (storage.cache_mb)


class Registry:
    def __init__(self, config: RegistryConfig) -> None:
        self.config = config
        self._agents: dict[str, Agent] = {}
        self._by_hash: dict[str, str] = {}
        self._sessions: dict[str, Session] = {}
        self._agent_table: RowTable | None = None
        self._session_table: RowTable | None = None
        self._manifest_table: RowTable | None = None
        self._stored_agents: set[str] = set()  # ids with a committed row: later changes are upserts
        self._stored_sessions: set[str] = set()
        self._ready_once = LoadOnce(self._load)
        self._agent_commit: GroupCommitter[Agent] = GroupCommitter(self._flush_agents, config.commit_window_s, 256)
        self._session_commit: GroupCommitter[Session] = GroupCommitter(self._flush_sessions, config.commit_window_s, 256)

    async def _ready(self) -> None:
        await self._ready_once()

    async def _load(self) -> None:
        store = await LanceStore.open(self.config.storage_uri, self.config.cache_mb << 20)
        self._agent_table = await store.table("registry_agents", AGENT_SCHEMA)
        self._session_table = await store.table("registry_sessions", SESSION_SCHEMA)
        self._manifest_table = await store.table("deployment_manifest", MANIFEST_SCHEMA)
        for agent in agents_from_arrow(await self._agent_table.read_all()):
            self._put(agent)
        for session in sessions_from_arrow(await self._session_table.read_all()):
            self._sessions[session.id] = session
        self._stored_agents = set(self._agents)
        self._stored_sessions = set(self._sessions)

    def _put(self, agent: Agent) -> None:
        previous = self._agents.get(agent.id)
        if previous is not None:
            self._by_hash.pop(previous.key_hash, None)
        self._agents[agent.id] = agent
        self._by_hash[agent.key_hash] = agent.id

    async def close(self) -> None:
        await self._agent_commit.close()
        await self._session_commit.close()

    async def claim_deployment(self, wanted: dict[str, str | int]) -> None:
        """Record the deployment's shape with the data on first start; refuse a different one later.

        Kept in the storage every node reaches (not on one head's disk), so a
        head started elsewhere with another shard count or engine is refused.
        """
        await self._ready()
        assert self._manifest_table is not None
        stored = {r["key"]: json.loads(r["value"]) for r in (await self._manifest_table.read_all()).to_pylist()}
        if not stored:
            rows = [{"key": k, "value": json.dumps(v)} for k, v in sorted(wanted.items())]
            await self._manifest_table.append(pa.Table.from_pylist(rows, schema=MANIFEST_SCHEMA))
            return
        for key, value in wanted.items():
            if key in stored and stored[key] != value:
                raise ConfigInvalid(f"{key} is {value!r} but this data was written with {stored[key]!r}")

    async def health(self) -> dict[str, int]:
        await self._ready()
        return {"agents": len(self._agents), "sessions": len(self._sessions), "pid": os.getpid()}

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

    async def set_read_scope(self, agent_id: str, projects: frozenset[str], now: datetime) -> Agent:
        agent = await self.get(agent_id)
        updated = replace(agent, read_scope=projects, updated_at=now)
        self._put(updated)
        await self._agent_commit.submit([updated])
        return updated

    # ------------------------------------------------------------------ sessions
    async def open_session(self, session: Session) -> Session:
        await self._ready()
        existing = self._sessions.get(session.id)
        if existing is not None:
            return existing
        self._sessions[session.id] = session
        await self._session_commit.submit([session])
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
        await self._session_commit.submit([closed])
        return closed

    async def _flush_agents(self, agents: list[Agent]) -> None:
        """New agents are appended; changed ones upserted (a merge over the whole table costs far more)."""
        assert self._agent_table is not None
        latest = {a.id: a for a in agents}
        await self._agent_table.append(agents_to_arrow(a for i, a in latest.items() if i not in self._stored_agents))
        await self._agent_table.upsert(agents_to_arrow(a for i, a in latest.items() if i in self._stored_agents))
        self._stored_agents.update(latest)
        await self._agent_table.optimize_if_due(self.config.optimize_every)

    async def _flush_sessions(self, sessions: list[Session]) -> None:
        assert self._session_table is not None
        latest = {s.id: s for s in sessions}
        await self._session_table.append(sessions_to_arrow(s for i, s in latest.items() if i not in self._stored_sessions))
        await self._session_table.upsert(sessions_to_arrow(s for i, s in latest.items() if i in self._stored_sessions))
        self._stored_sessions.update(latest)
        await self._session_table.optimize_if_due(self.config.optimize_every)
