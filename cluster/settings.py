"""The one settings class of memesh.

Sources, strongest first: constructor arguments, ``MEMESH_*`` environment
variables (nested with ``__``: ``MEMESH_PULL__MAX_BATCH=128``), the TOML file
named by ``MEMESH_CONFIG`` (default ``./memesh.toml`` when present), then the
defaults below. Built once, in the composition root, and passed down; nothing
else reads the environment. ``docs/configuration.md`` lists every key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from cluster.server_settings import Section, ServerSettings
from head.cpus import usable_cpus
from mesh.inbox import Budget
from mesh.standing import StandingPrior
from mesh.tuning import Ranking, RecallTuning, RetrievalTuning, SceneTuning
from mesh.walk import EnergyPolicy


class StorageSettings(Section):
    data_dir: Path = Path("./data")
    uri: str | None = None  # any URI LanceDB accepts; default <data_dir>/lance
    options: dict[str, str] = Field(default_factory=dict)  # LanceDB storage options (endpoint, region, ...)
    commit_window_ms: float = Field(2.0, ge=0)
    soft_commit_window_ms: float = Field(1000.0, ge=0, le=60_000)  # soft state: agent nodes, walk marks, trims
    access_commit_window_ms: float = Field(10_000.0, ge=0, le=600_000)  # recall's access times (soft state too)
    commit_max_rows: int = Field(1024, ge=1)
    optimize_every: int = Field(64, ge=1)
    cache_mb: int = Field(32, ge=1, le=65_536)  # per actor: LanceDB's index and metadata caches
    fsync: bool = False  # answer a write only once the file system has it on stable storage (docs/storage.md)
    keep_versions_s: float = Field(30.0, ge=0)  # compaction drops table versions older than this
    # A local database's writes are acknowledged once journaled, committed to LanceDB behind the answer
    # (docs/storage.md#the-write-journal); an object store always commits before answering.
    write_journal: bool = True

    def lance_uri(self) -> str:
        return self.uri or str((self.data_dir / "lance").resolve())


class RaySettings(Section):
    address: str | None = None  # join this cluster; None starts a local Ray
    namespace: str = "memesh"
    scene_shards: int = Field(2, ge=1, le=1024)
    beacon_sets: int = Field(2, ge=1, le=1024)
    inbox_shards: int = Field(2, ge=1, le=1024)
    in_process: bool = False  # run every actor inside the server process (no Ray); for notebooks and debugging
    detached: bool = False  # actors outlive the head that made them: for several heads joined to one cluster
    placement: Literal["pack", "spread"] = "pack"  # spread: actors across the cluster's nodes (Ray's SPREAD strategy)
    # The hot calls (searches, writes, waves, deliveries, encodes) to an actor on the caller's own node go
    # through a Unix socket the actor serves (actors.node_lane) instead of a Ray task; false: Ray for all.
    node_lanes: bool = True


DEFAULT_POOL_MAX = 4  # model copies by default: past it, each copy gets more threads instead (~0.4 GB a copy)


class EmbeddingSettings(Section):
    # The same all-MiniLM-L6-v2 weights through ONNX Runtime (the default: the same vectors as torch's
    # ``minilm``, and cheaper for the small batches concurrent requests make; docs/decisions.md).
    engine: Literal["minilm", "minilm-onnx", "minilm-bf16", "hash"] = "minilm-onnx"
    dims: int = Field(384, ge=8, le=4096)  # the hash engine's width; the minilm engines are always 384
    max_batch: int = Field(64, ge=1, le=1024)
    # Embedder actors shared by every head; 0: each head embeds with its own model. None: one per usable
    # CPU (at most DEFAULT_POOL_MAX) for a model engine on Ray, none for ``hash`` or ``ray.in_process``
    # (Settings.embedder_pool). ``threads`` None: the usable CPUs shared out over them (Settings.embedder_threads).
    pool: int | None = Field(None, ge=0, le=64)
    threads: int | None = Field(None, ge=1)
    # A batch a head sends while none of its own is in flight runs on every usable CPU's threads in its
    # pool actor (a lone request is not held to one copy's share); false: always the copy's ``threads``.
    wide_lone: bool = True
    max_queued_texts: int = Field(4_096, ge=1)  # texts waiting for the model, all tenants; 429 beyond
    max_queued_texts_per_tenant: int = Field(1_024, ge=1)  # one tenant's share of that queue


class PullSettings(Section):
    max_batch: int = Field(256, ge=1, le=10_000)


class BucketSettings(Section):
    """A per-caller token bucket: ``rate`` tokens a second (0 disables it), up to ``burst``."""

    rate: float = Field(200.0, ge=0)
    burst: float = Field(400.0, ge=1)


class InboxBucketSettings(BucketSettings):
    rate: float = Field(100.0, ge=0)
    burst: float = Field(200.0, ge=1)


class AdminBucketSettings(BucketSettings):
    rate: float = Field(20.0, ge=0)
    burst: float = Field(40.0, ge=1)


class AuthFailureBucketSettings(BucketSettings):
    rate: float = Field(10.0, ge=0)
    burst: float = Field(50.0, ge=1)


class RateLimitSettings(Section):
    """Per-caller buckets; ``auth_failures`` is per client address (requests whose credential failed)."""

    read: BucketSettings = BucketSettings()
    write: BucketSettings = BucketSettings()
    inbox: InboxBucketSettings = InboxBucketSettings()
    admin: AdminBucketSettings = AdminBucketSettings()
    auth_failures: AuthFailureBucketSettings = AuthFailureBucketSettings()


class PropagationSettings(Section):
    """The energy walk (docs/propagation.md): energy, costs, gate, fan-out."""

    enabled: bool = True  # off: writes start no walk (nothing is pushed) and count as walked, so none is replayed later
    base_energy: float = Field(0.4, gt=0, le=10)
    salience_energy: float = Field(0.6, ge=0, le=10)
    min_cost: float = Field(0.05, gt=0)
    max_cost: float = Field(0.5, gt=0)
    floor: float = Field(0.05, ge=0)
    gate: float = Field(0.3, ge=-1, le=1)
    fan_out: int = Field(8, ge=1, le=256)
    max_hops: int = Field(16, ge=1, le=256)
    deliver_to_writer: bool = False
    walk_batch: int = Field(64, ge=1, le=4096)
    max_walk_backlog: int = Field(100_000, ge=1)  # per scene shard; at it, writes to the shard get 429
    read_yield_s: float = Field(0.002, ge=0, le=1)  # walks yield to reads: a wave's pause per part while searches are recent
    read_window_s: float = Field(0.05, ge=0, le=60)  # how recent a shard's last search must be for its waves to pause
    max_inflight_records: int = Field(64, ge=1)
    owner_addressed: bool = True  # a wave messages only owners that may hold the tenant (mesh/presence.py)
    walkers: int | None = Field(None, ge=1, le=1024)  # walker actors (actors/walker.py); None: one per scene shard at start
    walker_nice: int = Field(10, ge=0, le=19)  # steps of OS niceness walkers run below the other actors (on Ray; at most 19)
    # Leaves (beacons, agent nodes): their own quota per frontier node, and the match rule (mesh/standing.py)
    leaf_fan_out: int = Field(8, ge=0, le=256)
    standout: float = Field(2.0, ge=0, le=100)  # standing (sd above the node's mean relevance) a leaf needs
    close_match: float = Field(0.65, ge=-1, le=1.01)  # relevance at which a leaf matches whatever its standing
    standout_floor: float = Field(0.2, ge=-1, le=1)  # relevance a standout also needs (noise never stands out)
    standing_prior_mean: float = Field(0.1, ge=-1, le=1)
    standing_prior_sd: float = Field(0.1, gt=0, le=2)
    standing_prior_weight: float = Field(20.0, ge=0)
    standing_half_life: float = Field(2_000.0, gt=0)  # writes of the tenant
    # Per reached node and ``budget_window_s``: at most ``node_budget`` standouts and ``close_match_budget`` close
    # matches; the best unseen kept, the rest counted on what is served (docs/propagation.md)
    node_budget: int = Field(4, ge=1, le=100_000)
    close_match_budget: int = Field(32, ge=1, le=100_000)
    budget_window_s: float = Field(3600.0, gt=0)

    @model_validator(mode="after")
    def _costs_ordered(self) -> PropagationSettings:
        if self.max_cost < self.min_cost:
            raise ValueError("propagation.max_cost must be at least min_cost")
        return self

    def policy(self) -> EnergyPolicy:
        return EnergyPolicy(
            base_energy=self.base_energy,
            salience_energy=self.salience_energy,
            min_cost=self.min_cost,
            max_cost=self.max_cost,
            floor=self.floor,
            gate=self.gate,
            fan_out=self.fan_out,
            max_hops=self.max_hops,
            leaf_fan_out=self.leaf_fan_out,
            standout=self.standout,
            close_match=self.close_match,
            standout_floor=self.standout_floor,
        )

    def budget(self) -> Budget:
        return Budget(self.node_budget, self.budget_window_s, self.close_match_budget)

    def prior(self) -> StandingPrior:
        return StandingPrior(
            self.standing_prior_mean, self.standing_prior_sd, self.standing_prior_weight, self.standing_half_life
        )


class ObservatorySettings(Section):
    enabled: bool | None = None  # None: on in dev, off in production
    sample_rate: float = Field(1.0, ge=0, le=1)
    max_events: int = Field(50_000, ge=1)
    max_age_s: float = Field(600.0, gt=0, validation_alias=AliasChoices("max_age_s", "max_age"))  # max_age: the spec's name
    stream_channel_capacity: int = Field(16_384, ge=1)
    max_concurrent_streams: int = Field(16, ge=1)
    max_streams_per_tenant: int = Field(4, ge=1)  # a ProjectAdmin's tenant; ServiceAdmins share only the global cap


class AdminSettings(Section):
    """The control plane; the console (``/admin``) logs operators in with OIDC (docs/console.md)."""

    console_enabled: bool = False
    bootstrap_oidc_subject: str | None = Field(None, min_length=1, max_length=255)
    principal_cache_ttl_s: float = Field(30.0, ge=0)
    oidc_issuer: str | None = (
        None  # the provider's issuer URL; its discovery document is <issuer>/.well-known/openid-configuration
    )
    oidc_client_id: str | None = None
    oidc_client_secret: SecretStr | None = None
    public_url: str | None = None  # the console's external base URL; None derives it from each request
    session_ttl_s: float = Field(8 * 3600.0, gt=0)
    state_ttl_s: float = Field(600.0, gt=0)
    max_sessions: int = Field(10_000, ge=1)  # console sessions held by one head; the oldest is dropped beyond it
    max_pending_logins: int = Field(10_000, ge=1)  # logins begun but not yet called back
    oidc_timeout_s: float = Field(10.0, gt=0)  # each request to the provider

    @model_validator(mode="after")
    def _console_needs_a_provider(self) -> AdminSettings:
        for name in ("oidc_issuer", "public_url"):
            value = getattr(self, name)
            if value is not None and not value.startswith(("https://", "http://")):
                raise ValueError(f"admin.{name} must be an http(s) URL")
        if self.console_enabled and not (self.oidc_issuer and self.oidc_client_id):
            raise ValueError("admin.console_enabled needs admin.oidc_issuer and admin.oidc_client_id")
        return self


class A2aSettings(Section):
    """The optional A2A binding (docs/a2a.md): the signed agent card and JSON-RPC at ``/a2a/v1``."""

    enabled: bool = False
    public_url: str | None = None  # the base URL the card advertises; None: http(s)://<server.host>:<server.port>
    name: str = Field("memesh", min_length=1, max_length=128)
    description: str = Field(
        "Shared memory for agents: recall, query and write knowledge, sessions, beacons and the inbox.",
        min_length=1,
        max_length=2048,
    )

    @model_validator(mode="after")
    def _url(self) -> A2aSettings:
        if self.public_url is not None and not self.public_url.startswith(("https://", "http://")):
            raise ValueError("a2a.public_url must be an http(s) URL")
        return self


class ScenesSettings(Section):
    join_similarity: float = Field(0.55, ge=-1, le=1)
    duplicate_similarity: float = Field(0.9, ge=-1, le=1)
    min_group: int = Field(2, ge=2)
    summary_members: int = Field(3, ge=1)
    summary_chars: int = Field(240, ge=16)
    max_members: int = Field(4_096, ge=2, le=65_536)

    def tuning(self) -> SceneTuning:
        return SceneTuning(**self.model_dump())


class RecallSettings(Section):
    w_similarity: float = Field(0.75, ge=0)
    w_salience: float = Field(0.15, ge=0)
    w_recency: float = Field(0.10, ge=0)
    recency_half_life_s: float = Field(7 * 24 * 3600.0, gt=0)
    candidates_factor: int = Field(4, ge=1)
    min_candidates: int = Field(32, ge=1)

    def tuning(self) -> RecallTuning:
        return RecallTuning(**self.model_dump())


class RetrievalSettings(Section):
    ranking: Ranking = Ranking.HYBRID
    rrf_k: int = Field(10, ge=1, le=10_000)
    w_dense: float = Field(1.0, ge=0)
    w_lexical: float = Field(1.0, ge=0)
    lexical_candidates: int = Field(5, ge=1, le=10_000)
    bm25_k1: float = Field(1.2, ge=0, le=100)
    bm25_b: float = Field(0.4, ge=0, le=1)
    batch_searches: bool = True  # concurrent searches share one actor call per scene shard

    def tuning(self) -> RetrievalTuning:
        return RetrievalTuning(**self.model_dump(exclude={"batch_searches"}))


class LimitsSettings(Section):
    """Bounds on what one request may ask for or store."""

    max_content_chars: int = Field(32_768, ge=1)
    max_batch_cells: int = Field(256, ge=1)
    max_k: int = Field(1_000, ge=1)
    max_text_chars: int = Field(8_192, ge=1)
    max_list: int = Field(500, ge=1)
    max_beacons_per_agent: int = Field(64, ge=1)
    min_beacon_ttl_s: float = Field(1.0, gt=0)
    max_beacon_ttl_s: float = Field(365 * 24 * 3600.0, gt=0, le=100 * 365 * 24 * 3600.0)
    max_open_sessions_per_agent: int = Field(256, ge=1)
    max_inbox_streams_per_agent: int = Field(4, ge=1)
    max_inbox_streams_per_tenant: int = Field(64, ge=1)  # so one tenant's agents cannot take every slot
    max_inbox_streams: int = Field(256, ge=1)  # open /v1/inbox streams on one head

    @model_validator(mode="after")
    def _ttl_ordered(self) -> LimitsSettings:
        if self.max_beacon_ttl_s < self.min_beacon_ttl_s:
            raise ValueError("limits.max_beacon_ttl_s must be at least min_beacon_ttl_s")
        return self


class QuotaSettings(Section):
    """Per-tenant quotas (429 ``quota_exceeded``, no Retry-After); 0 turns one off."""

    max_cells_per_tenant: int = Field(250_000, ge=0)
    max_beacons_per_tenant: int = Field(4_096, ge=0)
    max_bytes_per_tenant: int = Field(512 * 1024 * 1024, ge=0)  # cells' and beacons' text and vectors
    refresh_s: float = Field(30.0, gt=0)  # how often a head re-reads a tenant's usage from the actors


class RetentionSettings(Section):
    """How long delivered, closed and expired state is kept (docs/operations.md)."""

    acked_delivery_max_age_s: float = Field(7 * 24 * 3600.0, gt=0)
    max_deliveries_per_inbox: int = Field(10_000, ge=1)
    closed_session_max_age_s: float = Field(24 * 3600.0, ge=0)
    max_closed_sessions_per_agent: int = Field(256, ge=1)  # past it an agent's oldest closed sessions are deleted
    sweep_interval_s: float = Field(60.0, ge=0)  # 0: no periodic sweep (tests)


class HeadsSettings(Section):
    """Several heads of one deployment (docs/scaling.md): how credential changes reach them all."""

    workers: int = Field(1, ge=1, le=64)  # head processes ``memesh serve`` runs on this machine (--workers)
    lease_s: float = Field(3.0, gt=0, le=60)  # a head not heard from this long is not waited for (and fences)
    poll_s: float = Field(1.0, gt=0, le=30)  # a head's long poll of the roster; below lease_s (else refused at start)
    attached: bool = False  # set by ``--workers`` for the heads it starts beside the first (not for operators)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MEMESH_", env_nested_delimiter="__", extra="forbid", frozen=True)

    profile: Literal["dev", "production"] = "dev"
    server: ServerSettings = ServerSettings()
    storage: StorageSettings = StorageSettings()
    ray: RaySettings = RaySettings()
    heads: HeadsSettings = HeadsSettings()
    embedding: EmbeddingSettings = EmbeddingSettings()
    pull: PullSettings = PullSettings()
    propagation: PropagationSettings = PropagationSettings()
    rate_limits: RateLimitSettings = RateLimitSettings()
    observatory: ObservatorySettings = ObservatorySettings()
    admin: AdminSettings = AdminSettings()
    a2a: A2aSettings = A2aSettings()
    scenes: ScenesSettings = ScenesSettings()
    recall: RecallSettings = RecallSettings()
    retrieval: RetrievalSettings = RetrievalSettings()
    limits: LimitsSettings = LimitsSettings()
    quotas: QuotaSettings = QuotaSettings()
    retention: RetentionSettings = RetentionSettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        named = os.environ.get("MEMESH_CONFIG")
        path = Path(named or "memesh.toml")
        if named and not path.is_file():
            raise ValueError(f"MEMESH_CONFIG names {named}, which is not a readable file")
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if path.is_file():
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)

    @model_validator(mode="after")
    def _bounds_that_fit(self) -> Settings:
        """A batch the embedding queue can never hold would be refused (429, retry) forever."""
        embedding = self.embedding
        if embedding.max_queued_texts_per_tenant > embedding.max_queued_texts:
            raise ValueError("embedding.max_queued_texts_per_tenant must not exceed embedding.max_queued_texts")
        if self.limits.max_batch_cells > embedding.max_queued_texts_per_tenant:
            raise ValueError("limits.max_batch_cells must not exceed embedding.max_queued_texts_per_tenant")
        return self

    @model_validator(mode="after")
    def _refuse_unsafe_production(self) -> Settings:
        if self.profile == "production":
            if self.embedding.engine not in ("minilm-onnx", "minilm", "minilm-bf16"):
                raise ValueError("the production profile needs a model engine (minilm-onnx, minilm, minilm-bf16)")
            if any(getattr(self.rate_limits, b).rate == 0 for b in ("read", "write", "inbox", "admin")):
                raise ValueError("the production profile refuses disabled rate limits")
            if self.ray.in_process:
                raise ValueError("the production profile runs actors on Ray (ray.in_process = false)")
            if self.admin.console_enabled and not self.server.tls:
                raise ValueError("the production profile refuses the console over a plaintext listener (set server.tls_certfile)")
            if self.admin.console_enabled and any(
                (url or "https://").startswith("http://") for url in (self.admin.oidc_issuer, self.admin.public_url)
            ):
                raise ValueError("the production profile needs https for admin.oidc_issuer and admin.public_url")
            if self.a2a.enabled and not (self.a2a.public_url or "").startswith("https://"):
                raise ValueError("the production profile needs an https a2a.public_url to serve A2A (the signed card names it)")
            if self.server.grpc_enabled and not self.server.grpc_loopback and not self.server.grpc_tls:
                raise ValueError(
                    "the production profile refuses the gRPC admin service in plaintext beyond loopback "
                    "(set server.grpc_tls_certfile, or server.grpc_host = 127.0.0.1)"
                )
        return self

    @property
    def grpc_reflection_enabled(self) -> bool:
        """Reflection on the gRPC data plane: ``server.grpc_reflection``, else on in dev only."""
        if self.server.grpc_reflection is not None:
            return self.server.grpc_reflection
        return self.profile == "dev"

    @property
    def embedder_pool(self) -> int:
        """Embedder actors in the deployment: ``embedding.pool``, else, for a model engine on Ray, one per
        CPU this machine lets the process use, at most ``DEFAULT_POOL_MAX``; none for ``hash`` or
        ``ray.in_process``. Out of the head's process, the model never shares the head's interpreter and
        its actors batch every head's texts; several one-thread copies beat one copy on every core,
        because a model's small batches use threads poorly (docs/benchmarks.md, "One model copy per CPU")."""
        if self.embedding.pool is not None:
            return self.embedding.pool
        return 0 if self.embedding.engine == "hash" or self.ray.in_process else min(usable_cpus(), DEFAULT_POOL_MAX)

    @property
    def embedder_threads(self) -> int | None:
        """Intra-op threads of each model copy: ``embedding.threads``, else this machine's usable CPUs shared
        out over the pool's copies (at least one each); None without a pool (the head's own model takes
        every usable CPU)."""
        if self.embedding.threads is not None:
            return self.embedding.threads
        pool = self.embedder_pool
        return max(1, usable_cpus() // pool) if pool else None

    @property
    def walker_pool(self) -> int:
        """Walker actors in the deployment: ``propagation.walkers``, else one per scene shard the deployment
        starts with; none when walks are off."""
        if not self.propagation.enabled:
            return 0
        return self.propagation.walkers if self.propagation.walkers is not None else self.ray.scene_shards

    @property
    def observatory_enabled(self) -> bool:
        if self.observatory.enabled is not None:
            return self.observatory.enabled
        return self.profile == "dev"
