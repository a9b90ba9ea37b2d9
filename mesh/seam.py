"""The actor seam: what each actor kind answers, typed, and how callers find one.

The head's use cases and the actors that call each other (a walk, the audit
helper) see actors only through these Protocols. ``actors`` implements them
twice, with the same classes: in-process (``actors.directory``) and on Ray
(``actors.ray_directory``); ``actors.kinds`` makes mypy check that every actor
class conforms to its Protocol, so a renamed method or a changed argument is a
type error at every caller. Failures arrive as :class:`mesh.errors.MemeshError`
on both sides; arguments and results are copied across the seam (as Ray
pickles them), so a caller never shares an object with an actor.

Every method is idempotent or says what a retry repeats: Ray may re-run a call
that a restart interrupted.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from mesh.audit import AuditRow
from mesh.console_sessions import ConsoleSession, PendingLogin
from mesh.deployment import DirectorySpec, Gate
from mesh.erasure import JournalEntry, Selector, ShardErasePlan
from mesh.identity import Agent, Principal, Role
from mesh.inbox_wire import InboxDelivery, PullResult
from mesh.layout import Layout, Settled
from mesh.model import Beacon, Cell, Scene, Session, Vector, WriterSums
from mesh.observation import Event, Numbered, WalkTrace
from mesh.query import NodeFilter, SearchReply, SearchRequest, Touched
from mesh.walk import NeighbourRequest
from mesh.walk_wire import PackedAnswers


class Actor(Protocol):
    """What every actor kind answers."""

    async def health(self) -> dict[str, int]:
        """Counters for ``/health`` and ``/metrics``; loads the actor's tables if needed."""
        ...

    async def close(self) -> None:
        """Drain pending commits so another owner may open the tables."""
        ...


class Reembedding(Protocol):
    """The staged re-embedding steps a scene shard and a beacon set share."""

    async def reembed_count(self) -> int: ...

    async def reembed_page(self, after: str | None, limit: int) -> list[tuple[str, str]]: ...

    async def stage(self, vectors: list[tuple[str, Vector]]) -> None: ...

    async def revert_staged(self) -> None: ...

    async def discard_staged(self) -> None: ...


class SceneShardActor(Actor, Reembedding, Protocol):
    """The cells and scenes of the (tenant, project) pairs that hash to one shard; runs their walks."""

    async def retire(self) -> None:
        """Commit everything pending and stop walking (an online resize replaces the shard; walks not
        started are replayed by the partitions' next owners)."""
        ...

    async def usage(self, tenant_id: str) -> tuple[int, int]: ...

    async def check_write(self, tenant_id: str, cells: list[Cell]) -> None: ...

    async def write(self, cells: list[Cell], new_scene_ids: list[str], admitted: bool = False) -> list[Cell]: ...

    async def settle(self, timeout_s: float = 30.0) -> int: ...

    async def neighbours_many(self, requests: list[NeighbourRequest]) -> PackedAnswers: ...

    async def tenants(self) -> list[str]: ...

    async def search_batch(self, requests: list[SearchRequest], seen: Touched | None = None) -> SearchReply: ...

    async def touch(self, cell_ids: list[str], now: datetime) -> None: ...

    async def get_scene(self, tenant_id: str, scene_id: str) -> Scene: ...

    async def list_scenes(
        self, tenant_id: str, project_id: str | None, after: str | None, limit: int, projects: frozenset[str] | None = None
    ) -> list[Scene]: ...

    async def consolidate(
        self, tenant_id: str, scene_id: str, source_agent: str, now: datetime
    ) -> tuple[Scene, list[Cell], list[Cell]]: ...

    async def get_cell(self, tenant_id: str, cell_id: str, tombstoned: bool = False) -> Cell | None: ...

    async def list_cells(self, tenant_id: str, flt: NodeFilter, after: str | None, limit: int) -> list[Cell]: ...

    async def locate(self, cell_id: str) -> tuple[str, str] | None: ...

    async def delete_cell(self, cell_id: str) -> bool: ...

    async def erase_plan(self, selector: Selector, quiesce: bool) -> ShardErasePlan: ...

    async def erase_cells(self, plan: ShardErasePlan) -> None: ...

    async def writer_sums(self, tenant_id: str, agent_ids: list[str]) -> WriterSums: ...

    async def persist_staged(self, engine: str) -> WriterSums: ...

    async def apply_staged(self, engine: str) -> None: ...


class BeaconSetActor(Actor, Reembedding, Protocol):
    """The beacons and agent nodes of the agents that hash to one set."""

    async def usage(self, tenant_id: str) -> tuple[int, int]: ...

    async def place(self, beacon: Beacon, max_per_agent: int) -> Beacon: ...

    async def remove(self, tenant_id: str, agent_id: str, beacon_id: str) -> bool: ...

    async def list_for(self, tenant_id: str, agent_id: str, now: datetime) -> list[Beacon]: ...

    async def neighbours_many(
        self, requests: list[NeighbourRequest], now: datetime, moves: list[tuple[str, str, Vector]] | None = None
    ) -> PackedAnswers: ...

    async def tenants(self) -> list[str]: ...

    async def observe_many(self, observations: list[tuple[str, str, Vector]]) -> None: ...

    async def locate(self, beacon_id: str) -> str | None: ...

    async def delete_beacon(self, beacon_id: str) -> bool: ...

    async def erase_count(self, agent_id: str | None, beacon_ids: list[str], writers: list[str]) -> tuple[int, int]: ...

    async def erase(self, agent_id: str | None, beacon_ids: list[str]) -> None: ...

    async def set_agent_sums(self, tenant_id: str, sums: WriterSums, agent_ids: list[str]) -> None: ...

    async def persist_staged(self, engine: str, writers: WriterSums) -> None: ...

    async def apply_staged(self, engine: str, writers: WriterSums) -> None: ...


class InboxShardActor(Actor, Protocol):
    """The inboxes of the agents that hash to one shard (virtual actors by agent id)."""

    async def deliver(self, deliveries: list[InboxDelivery]) -> int: ...

    async def pull(
        self,
        agent_id: str,
        since: int | None,
        ack: int | None,
        limit: int | None,
        max_batch: int,
        read_scope: frozenset[str],
        by_seq: bool = False,
    ) -> PullResult: ...

    async def ack(self, agent_id: str, ack: int) -> int: ...

    async def cursor(self, agent_id: str) -> int: ...

    async def next_page(
        self, agent_id: str, since: int, max_batch: int, read_scope: frozenset[str], timeout_s: float
    ) -> PullResult: ...
    async def wait(self, agent_id: str, after_seq: int, timeout_s: float) -> int: ...

    async def erase_count(self, diff_ids: list[str], agent_id: str | None) -> int: ...

    async def erase(self, diff_ids: list[str], agent_id: str | None) -> None: ...


class RegistryActor(Actor, Protocol):
    """Agents, credentials, sessions, OIDC subjects, descriptors and the deployment manifest."""

    async def settle_layout(self, wanted: dict[str, int], dims: int, running: bool, online: bool = False) -> Settled: ...

    async def layout_in_force(self, wanted: dict[str, int]) -> Layout: ...

    async def claim_deployment(self, wanted: dict[str, str | int]) -> str | None: ...

    async def set_corpus_engine(self, engine: str) -> None: ...

    async def remember_erasure_key(self, public_jwk: dict[str, Any]) -> list[dict[str, Any]]: ...

    async def authenticate(self, key_hash: str) -> Principal | None: ...

    async def issue(
        self,
        agent_id: str,
        tenant_id: str,
        display_name: str,
        roles: frozenset[Role],
        read_scope: frozenset[str],
        now: datetime,
        bootstrap: bool = False,
    ) -> tuple[Agent, str | None]: ...

    async def ensure_bootstrap_admin(self, agent_id: str, now: datetime) -> tuple[Agent, str | None]: ...

    async def get(self, agent_id: str) -> Agent: ...

    async def list_agents(self, tenant_id: str | None, after: str | None, limit: int) -> list[Agent]: ...

    async def apply(self, agent_id: str, action: str, now: datetime) -> tuple[Agent, str | None]: ...

    async def bind_subject(self, subject: str, agent_id: str, now: datetime) -> Agent: ...

    async def resolve_subject(self, subject: str) -> Agent | None: ...

    async def ensure_bootstrap_subject(self, subject: str, agent_id: str, now: datetime) -> tuple[Agent, bool]: ...

    async def open_session(self, session: Session) -> Session: ...

    async def get_session(self, session_id: str) -> Session: ...

    async def close_session(self, session_id: str, now: datetime) -> Session: ...

    async def get_descriptor(self, agent_id: str) -> str | None: ...

    async def put_descriptor(self, agent_id: str, descriptor_json: str) -> None: ...

    async def erase_sessions(self, tenant_id: str, project_id: str | None, agent_id: str | None, dry_run: bool) -> int: ...


class AuditLogActor(Actor, Protocol):
    """The hash-chained audit rows and the erase journal (one writer for both)."""

    async def append(
        self,
        kind: str,
        actor_agent: str,
        actor_tenant: str,
        target: str,
        outcome: str,
        detail: dict[str, Any],
        op_id: str | None = None,
    ) -> int: ...

    async def verify(self) -> dict[str, Any]: ...

    async def rows(self, after: int, limit: int) -> list[AuditRow]: ...

    async def journal_open(self, entry: JournalEntry) -> None: ...

    async def journal_finish(self, erase_id: str, certificate: dict[str, Any], row: dict[str, Any]) -> None: ...

    async def journal_answered(self, erase_id: str) -> None: ...

    async def journal_unfinished(self) -> list[JournalEntry]: ...

    async def begin_exclusive(self, what: str, holder: str, lease_s: float) -> None: ...

    async def end_exclusive(self, holder: str) -> None: ...


class ObservatoryActor(Actor, Protocol):
    """The bounded ring buffer of hop events."""

    async def record(self, events: list[Event], dropped_before: int = 0) -> None: ...

    async def record_walks(self, traces: list[WalkTrace], dropped_before: int = 0) -> None: ...

    async def events_after(self, after_seq: int, limit: int, timeout_s: float) -> tuple[list[Numbered], int, int]: ...

    async def replay_page(
        self, after_seq: int, upto: int, limit: int, since: float | None, tenant_id: str | None
    ) -> tuple[list[Numbered], int]: ...

    async def snapshot(self, since: float | None, limit: int, tenant_id: str | None) -> list[Event]: ...

    async def forget(self, diff_ids: list[str]) -> int: ...

    async def stats(self) -> dict[str, int]: ...


class HeadRosterActor(Actor, Protocol):
    """The heads of the deployment and the credential changes each must hear (``mesh.roster``)."""

    async def poll(self, head_id: str, seen: int, timeout_s: float) -> tuple[int, list[str], int, str]: ...

    async def publish(self, agent_id: str, timeout_s: float, publisher: str = "") -> int: ...

    async def leave(self, head_id: str) -> int: ...

    async def heads(self) -> int: ...


class ConsoleStateActor(Actor, Protocol):
    """The console's sessions and logins under way, shared by every head (``mesh.console_sessions``)."""

    async def open_session(self, agent_id: str, subject: str, now: datetime) -> tuple[str, ConsoleSession]: ...

    async def session(self, token: str | None, now: datetime) -> ConsoleSession | None: ...

    async def drop_session(self, token: str | None, now: datetime) -> bool: ...

    async def sessions(self) -> int: ...

    async def put_login(self, state: str, login: PendingLogin, now: datetime, owner: str) -> datetime: ...

    async def take_login(self, state: str | None, now: datetime) -> PendingLogin | None: ...


class EmbedderActor(Actor, Protocol):
    """One copy of the model, batching the texts of every head (``embedding.pool``). ``wide``: the caller
    has nothing else in flight on the pool; a batch of that call alone may use every CPU's threads.
    ``engine``: the name of another engine of the same width to encode with (a stored corpus's, served
    until a reembed); None, the copy's own."""

    async def encode(self, texts: list[str], wide: bool = False, engine: str | None = None) -> Vector: ...


class WalkerActor(Actor, Protocol):
    """Runs the walks a scene shard's writes start (``propagation.walkers``): in a process of its own, at
    a lower OS priority, so a walk backlog never holds the scene shards' event loops nor outruns requests
    for the CPU."""

    async def walk(self, spec: DirectorySpec, jobs: list[tuple[Cell, Vector]], now: datetime, observe: bool) -> int: ...

    async def note_presence(self, kind: str, index: int, tenants: list[str]) -> None: ...


class Directory(Protocol):
    """Finds actors by role and partition, never by a handle a caller keeps (an actor may restart or move)."""

    spec: DirectorySpec

    def scene_shard(self, index: int) -> SceneShardActor: ...

    def beacon_set(self, index: int) -> BeaconSetActor: ...

    def inbox_shard(self, index: int) -> InboxShardActor: ...

    def registry(self) -> RegistryActor: ...

    def observatory(self) -> ObservatoryActor: ...

    def head_roster(self) -> HeadRosterActor: ...

    def console_state(self) -> ConsoleStateActor: ...

    def embedder(self, index: int) -> EmbedderActor: ...

    def walker(self, index: int) -> WalkerActor: ...

    def audit_log(self) -> AuditLogActor: ...

    async def close(self, last: bool = True) -> None:
        """Drain every actor's pending work; ``last`` false (other heads still serve): only let go."""
        ...

    @property
    def gate(self) -> Gate:
        """The gate this head's calls to partitioned actors pass."""
        ...

    async def retire_partitions(self) -> None:
        """Drain and stop every scene shard, beacon set and inbox shard (their partitions are about to move)."""
        ...

    async def prepare_partitions(self, spec: DirectorySpec, plan: dict[str, tuple[type, tuple[Any, ...]]]) -> None:
        """Start the partitioned actors of ``plan`` ahead of a move (they load nothing before their first call)."""
        ...

    def discard_prepared(self) -> None:
        """Stop what ``prepare_partitions`` started (the move did not happen)."""
        ...

    async def adopt_partitions(self, spec: DirectorySpec, plan: dict[str, tuple[type, tuple[Any, ...]]]) -> None:
        """Route by ``spec`` and start the partitioned actors of ``plan`` (the others run on)."""
        ...

    def follow(self, spec: DirectorySpec) -> None:
        """Route by ``spec``: another head replaced the partitioned actors."""
        ...


def beacon_set_index(directory: Directory, agent_id: str) -> int:
    """The one mapping from an agent to the BeaconSet holding its beacons and agent node."""
    return directory.spec.owner("beacon_set", agent_id)


def inbox_index(directory: Directory, agent_id: str) -> int:
    """The one mapping from an agent to the InboxShard holding its inbox."""
    return directory.spec.owner("inbox_shard", agent_id)


def partitioned_actors(directory: Directory) -> list[Actor]:
    """Every scene shard, beacon set and inbox shard: the actors whose partitions a resize moves."""
    return [*scene_shards(directory), *beacon_sets(directory), *inbox_shards(directory)]


def scene_shards(directory: Directory) -> list[SceneShardActor]:
    return [directory.scene_shard(i) for i in range(directory.spec.scene_shards)]


def beacon_sets(directory: Directory) -> list[BeaconSetActor]:
    return [directory.beacon_set(i) for i in range(directory.spec.beacon_sets)]


def inbox_shards(directory: Directory) -> list[InboxShardActor]:
    return [directory.inbox_shard(i) for i in range(directory.spec.inbox_shards)]


def actor_kinds(directory: Directory) -> list[str]:
    """The kind of each actor of :func:`every_actor`, in its order."""
    spec = directory.spec
    return [
        *["scene_shard"] * spec.scene_shards,
        *["beacon_set"] * spec.beacon_sets,
        *["inbox_shard"] * spec.inbox_shards,
        "registry",
        "observatory",
        "audit_log",
        "head_roster",
        "console_state",
        *["embedder"] * spec.embedders,
        *["walker"] * spec.walkers,
    ]


def every_actor(directory: Directory) -> list[Actor]:
    """Every actor of the deployment, partitions first."""
    return [
        *scene_shards(directory),
        *beacon_sets(directory),
        *inbox_shards(directory),
        directory.registry(),
        directory.observatory(),
        directory.audit_log(),
        directory.head_roster(),
        directory.console_state(),
        *(directory.embedder(i) for i in range(directory.spec.embedders)),
        *(directory.walker(i) for i in range(directory.spec.walkers)),
    ]
