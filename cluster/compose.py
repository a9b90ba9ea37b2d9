"""The composition root: settings in, a running :class:`~head.facade.Memesh` out.

The only place that knows both the settings and the concrete parts (Ray or
in-process directory, embedding engine, storage URI).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from actors.audit_log import AuditLog, AuditLogConfig
from actors.beacon_set import BeaconSet, BeaconSetConfig
from actors.console_state import ConsoleState, ConsoleStateConfig
from actors.directory import InProcessDirectory
from actors.embedder import EmbedderConfig, EmbedderWorker
from actors.head_roster import HeadRoster, HeadRosterConfig
from actors.inbox_shard import InboxRetention, InboxShard, InboxShardConfig
from actors.kinds import REGISTRY
from actors.observatory import Observatory, ObservatoryConfig
from actors.propagation import PropagationConfig
from actors.registry import Registry, RegistryConfig
from actors.resize import settle_layout_blocking
from actors.scene_shard import SceneShard, ShardConfig
from actors.storage import StorageConfig
from actors.walker import Lookups, Walker, WalkerConfig
from cluster.settings import Settings
from head.embedding import Embedder, EmbeddingEngine, engine_named, make_engine
from head.erasure_signing import ErasureSigner
from head.facade import Bucket, Memesh
from head.inbox_service import InboxLimits
from head.memory_service import MemoryLimits
from head.observatory_hub import ObservatoryHubConfig
from head.pooled_engine import PooledEngine
from head.private_files import write_private_file
from head.usage import Quotas
from mesh.deployment import DirectorySpec
from mesh.layout import Layout, Settled
from mesh.ratelimit import BucketPolicy
from mesh.seam import Directory

log = logging.getLogger(__name__)

BOOTSTRAP_KEY_FILE = "bootstrap-admin.key"


def directory_spec(settings: Settings) -> DirectorySpec:
    ray = settings.ray
    return DirectorySpec(
        ray.namespace, ray.scene_shards, ray.beacon_sets, ray.inbox_shards, settings.embedder_pool, settings.walker_pool
    )


def storage_config(settings: Settings) -> StorageConfig:
    storage = settings.storage
    return StorageConfig(
        uri=storage.lance_uri(),
        options=dict(storage.options),
        commit_window_s=storage.commit_window_ms / 1000.0,
        soft_commit_window_s=storage.soft_commit_window_ms / 1000.0,
        access_commit_window_s=storage.access_commit_window_ms / 1000.0,
        optimize_every=storage.optimize_every,
        cache_mb=storage.cache_mb,
        fsync=storage.fsync,
        keep_versions_s=storage.keep_versions_s,
        commit_max_rows=storage.commit_max_rows,
        write_journal=storage.write_journal,
    )


def wanted_counts(settings: Settings) -> dict[str, int]:
    ray = settings.ray
    return {"scene_shard": ray.scene_shards, "beacon_set": ray.beacon_sets, "inbox_shard": ray.inbox_shards}


def registry_plan(settings: Settings) -> dict[str, tuple[type, tuple[Any, ...]]]:
    """The registry, created first: it settles the partition layout the others start with."""
    retention = settings.retention
    registry = RegistryConfig(
        storage=storage_config(settings),
        max_open_sessions=settings.limits.max_open_sessions_per_agent,
        closed_session_max_age_s=retention.closed_session_max_age_s,
        sweep_interval_s=retention.sweep_interval_s,
        max_closed_sessions=retention.max_closed_sessions_per_agent,
    )
    return {"registry": (Registry, (registry,))}


def actor_plan(
    settings: Settings, dims: int, lookup: Callable[[], Directory] | None, layout: Layout | None = None
) -> dict[str, tuple[type, tuple[Any, ...]]]:
    """Every actor of the deployment: its name, class and constructor arguments; the partitioned ones own
    the tables of ``layout``'s generations (settled first: ``actors.resize``)."""
    layout = layout or Layout(wanted_counts(settings))
    storage = storage_config(settings)
    retention = settings.retention
    prop = settings.propagation
    propagation = PropagationConfig(
        policy=prop.policy(),
        deliver_to_writer=prop.deliver_to_writer,
        observe=settings.observatory_enabled,
        sample_rate=settings.observatory.sample_rate,
        max_inflight_records=prop.max_inflight_records,
        owner_addressed=prop.owner_addressed,
    )
    plan: dict[str, tuple[type, tuple[Any, ...]]] = {}
    for i in range(layout.counts["scene_shard"]):
        config = ShardConfig(
            storage=storage,
            index=i,
            dims=dims,
            tuning=settings.scenes.tuning(),
            walks=prop.enabled,
            walk_batch=prop.walk_batch,
            max_walk_backlog=prop.max_walk_backlog,
            read_yield_s=prop.read_yield_s,
            read_window_s=prop.read_window_s,
            generation=layout.generation("scene_shard"),
            heads_lease_s=settings.heads.lease_s,
            heads_poll_s=settings.heads.poll_s,
        )
        plan[f"scene_shard:{i}"] = (SceneShard, (config, lookup))
    nice = 0 if lookup is None else prop.walker_nice  # in process, never: the walker would share the head's process
    walker_lookups = None if lookup is None else ray_lookups(settings.ray.node_lanes)
    for i in range(settings.walker_pool):
        plan[f"walker:{i}"] = (Walker, (WalkerConfig(propagation, i, nice), walker_lookups))
    for i in range(layout.counts["beacon_set"]):
        beacon_config = BeaconSetConfig(
            storage, i, dims, retention.sweep_interval_s, prop.prior(), generation=layout.generation("beacon_set")
        )
        plan[f"beacon_set:{i}"] = (BeaconSet, (beacon_config, lookup))
    inbox_retention = InboxRetention(
        acked_max_age_s=retention.acked_delivery_max_age_s,
        max_deliveries=retention.max_deliveries_per_inbox,
        sweep_interval_s=retention.sweep_interval_s,
        budget=prop.budget(),
    )
    for i in range(layout.counts["inbox_shard"]):
        inbox_config = InboxShardConfig(storage, i, inbox_retention, layout.generation("inbox_shard"))
        plan[f"inbox_shard:{i}"] = (InboxShard, (inbox_config,))
    plan.update(registry_plan(settings))
    observatory = ObservatoryConfig(settings.observatory.max_events, settings.observatory.max_age_s)
    plan["observatory"] = (Observatory, (observatory,))
    plan["audit_log"] = (AuditLog, (AuditLogConfig(storage),))
    plan["head_roster"] = (HeadRoster, (HeadRosterConfig(settings.heads.lease_s),))  # heads fence on the same lease
    admin = settings.admin
    console = ConsoleStateConfig(admin.session_ttl_s, admin.max_sessions, admin.state_ttl_s, admin.max_pending_logins)
    plan["console_state"] = (ConsoleState, (console,))
    embedding = settings.embedding
    model = partial(make_engine, embedding.engine, embedding.dims, settings.embedder_threads)  # built in each embedder actor
    wide = wide_engine(settings)
    named = partial(engine_named, threads=settings.embedder_threads)  # a stored corpus's engine, served until a reembed
    for i in range(settings.embedder_pool):
        plan[f"embedder:{i}"] = (EmbedderWorker, (EmbedderConfig(model, embedding.max_batch, wide, named),))
    return plan


# Engines whose lone encode is faster on every CPU's threads. Not ``minilm-onnx``: ONNX Runtime's threads spin
# for about 30 ms after each run, so a lone encode on two threads took 5.7 ms but 37 ms of CPU, and with the
# spin turned off two threads were no faster than one (8.9 against 8.4 ms); served wide, lone writes were
# slower (22 to 25 ms p50 against 19 to 19.5 narrow). docs/benchmarks.md, "ONNX Runtime by default".
WIDE_ENGINES = frozenset({"minilm"})


def wide_engine(settings: Settings) -> Callable[[], EmbeddingEngine] | None:
    """What an embedder actor runs a lone batch on (``embedding.wide_lone``): its engine on every usable CPU, or
    None (always the copy's own threads) for one copy (it has every CPU already) or an engine it would slow."""
    embedding = settings.embedding
    if not embedding.wide_lone or settings.embedder_pool < 2 or embedding.engine not in WIDE_ENGINES:
        return None
    return partial(make_engine, embedding.engine, embedding.dims, None)


def build_directory(settings: Settings, dims: int) -> tuple[Directory, Settled]:
    """Settle the partition layout (a changed shard count is resized here, before any actor starts:
    ``actors.resize``), then create the deployment's actors, or attach to them when they run."""
    spec = directory_spec(settings)
    wanted = wanted_counts(settings)
    if settings.ray.in_process:
        with ThreadPoolExecutor(1) as pool:  # its own event loop, whatever the caller runs
            settled = pool.submit(settle_layout_blocking, storage_config(settings), wanted, dims, False).result()
        plan = actor_plan(settings, dims, None, settled.layout)
        spec = spec.following(settled.layout)
        return InProcessDirectory(spec, {name: cls(*args) for name, (cls, args) in plan.items()}), settled
    from actors.ray_directory import RayDirectory, RayLookup, connect, deployment_running

    connect(settings.ray.address, settings.ray.namespace)
    running = deployment_running(spec)
    ray_settings = settings.ray
    directory = RayDirectory(
        spec, registry_plan(settings), ray_settings.detached, ray_settings.placement == "spread", ray_settings.node_lanes
    )
    # The registry (the manifest's one writer) settles the layout, resizing first if the counts changed.
    settled = directory.call_now(REGISTRY, "settle_layout", wanted, dims, running)
    directory.spec = spec = spec.following(settled.layout)  # route by the assignment in force
    # ``ray.detached``: heads joined to a Ray cluster come and go, the actors outlive the head that made
    # them. Otherwise they share its fate (one machine; ``--workers`` heads attach to the first head's Ray).
    # ``ray.placement``: "spread" puts the actors on as many nodes as the cluster has (a lost node then
    # takes a fraction of them, restarted elsewhere from shared storage); "pack" keeps Ray's default.
    directory.create(actor_plan(settings, dims, RayLookup(spec, ray_settings.node_lanes), settled.layout))
    return directory, settled


def rate_policies(settings: Settings) -> dict[str, BucketPolicy]:
    limits = settings.rate_limits
    return {
        Bucket.READ.value: BucketPolicy(limits.read.rate, limits.read.burst),
        Bucket.WRITE.value: BucketPolicy(limits.write.rate, limits.write.burst),
        Bucket.INBOX.value: BucketPolicy(limits.inbox.rate, limits.inbox.burst),
        Bucket.ADMIN.value: BucketPolicy(limits.admin.rate, limits.admin.burst),
        Bucket.AUTH_FAILURES.value: BucketPolicy(limits.auth_failures.rate, limits.auth_failures.burst),
    }


def build_memesh(settings: Settings) -> Memesh:
    local = make_engine(settings.embedding.engine, settings.embedding.dims, settings.embedding.threads)  # loads lazily
    settings.storage.data_dir.mkdir(parents=True, exist_ok=True)

    def reembed_target() -> EmbeddingEngine:
        """The configured engine (it serves too unless the stored corpus was made by another)."""
        return engine

    directory, settled = build_directory(settings, local.dims)
    for move in settled.moves:
        log.warning("resize: %s", move)
    pool = settings.embedder_pool
    widens = wide_engine(settings) is not None
    engine: EmbeddingEngine = PooledEngine(directory, local.name, local.dims, pool, widens=widens) if pool else local
    limits, quotas, embedding = settings.limits, settings.quotas, settings.embedding
    memesh = Memesh(
        directory,
        Embedder(engine, embedding.max_batch, embedding.max_queued_texts, embedding.max_queued_texts_per_tenant),
        rate_policies(settings),
        recall_tuning=settings.recall.tuning(),
        retrieval_tuning=settings.retrieval.tuning(),
        batch_searches=settings.retrieval.batch_searches,
        limits=MemoryLimits(
            max_content_chars=limits.max_content_chars,
            max_batch_cells=limits.max_batch_cells,
            max_k=limits.max_k,
            max_text_chars=limits.max_text_chars,
            max_list=limits.max_list,
        ),
        principal_cache_ttl_s=settings.admin.principal_cache_ttl_s,
        inbox_limits=InboxLimits(
            max_batch=settings.pull.max_batch,
            max_interest_chars=limits.max_text_chars,
            max_beacons_per_agent=limits.max_beacons_per_agent,
            min_beacon_ttl_s=limits.min_beacon_ttl_s,
            max_beacon_ttl_s=limits.max_beacon_ttl_s,
            max_streams_per_agent=limits.max_inbox_streams_per_agent,
            max_streams_per_tenant=limits.max_inbox_streams_per_tenant,
            max_streams=limits.max_inbox_streams,
        ),
        observatory=ObservatoryHubConfig(
            channel_capacity=settings.observatory.stream_channel_capacity,
            max_streams=settings.observatory.max_concurrent_streams,
            max_streams_per_tenant=settings.observatory.max_streams_per_tenant,
        ),
        signer=ErasureSigner.load_or_create(settings.storage.data_dir),
        reembed_target=reembed_target,
        quotas=Quotas(quotas.max_cells_per_tenant, quotas.max_beacons_per_tenant, quotas.max_bytes_per_tenant, quotas.refresh_s),
        bootstrap_subject=settings.admin.bootstrap_oidc_subject,
        health_cache_s=settings.server.health_cache_s,
        heads_lease_s=settings.heads.lease_s,
        heads_poll_s=settings.heads.poll_s,
    )
    memesh.partitions = settled
    memesh.resizer.plan_for = partial(plan_for, settings, local.dims)
    return memesh


def plan_for(settings: Settings, dims: int, layout: Layout, spec: DirectorySpec) -> dict[str, tuple[type, tuple[Any, ...]]]:
    """The actors of ``layout`` (an online resize starts its partitioned ones: ``head.partition_resizer``)."""
    lookup = None if settings.ray.in_process else ray_lookup(spec, settings.ray.node_lanes)
    return actor_plan(settings, dims, lookup, layout)


def ray_lookup(spec: DirectorySpec, lanes: bool = True) -> Callable[[], Directory]:
    from actors.ray_directory import RayLookup

    return RayLookup(spec, lanes)


def ray_lookups(lanes: bool = True) -> Lookups:
    """How a walker finds the actors of the layout a scene shard sends it (a new one after an online resize)."""
    from actors.ray_directory import RayLookup

    return partial(RayLookup, lanes=lanes)


async def start_core(memesh: Memesh, settings: Settings) -> Path | None:
    """What every start does before serving: check the deployment's shape against the
    data (ConfigInvalid when a partition count or the vector width changed; another
    engine of the same width serves the stored corpus until a reembed), then make
    sure the bootstrap admin exists. Returns the key file when this start wrote it."""
    wanted: dict[str, str | int] = {
        "scene_shards": settings.ray.scene_shards,
        "beacon_sets": settings.ray.beacon_sets,
        "inbox_shards": settings.ray.inbox_shards,
        "embedding_engine": memesh.embedder.name,
        "dims": memesh.embedder.dims,
    }
    corpus_engine: str | None = await memesh.directory.registry().claim_deployment(wanted)
    if corpus_engine is not None:
        # The data was embedded by another engine of the same width: serve with that one until a
        # reembed (POST /admin/api/reembed) moves the corpus to the configured engine.
        log.warning(
            "the corpus was embedded with %s; serving with it until a reembed moves it to %s", corpus_engine, memesh.embedder.name
        )
        serving = memesh.embedder.engine
        # The pool's actors build the corpus's engine next to their own (each with its copy's threads).
        memesh.embedder.swap(
            serving.serving(corpus_engine)
            if isinstance(serving, PooledEngine)
            else engine_named(corpus_engine, settings.embedding.threads)
        )
    await memesh.data.publish_key()  # every receipt key the deployment used stays published
    key_path = await write_bootstrap_key(memesh, settings.storage.data_dir)
    if settings.admin.bootstrap_oidc_subject:
        # The first console operator: bound once to a ServiceAdmin identity; a restart binds nothing new.
        await memesh.identity.ensure_bootstrap_subject(settings.admin.bootstrap_oidc_subject)
    await memesh.data.resume()  # erases a crash interrupted run to their end (in the background)
    return key_path


async def write_bootstrap_key(memesh: Memesh, data_dir: Path) -> Path | None:
    """Create the bootstrap ServiceAdmin on first start and write its key (mode 0600).

    Returns the key file's path when this start created it; None when the
    admin already existed (a restart writes no new key).
    """
    plaintext = await memesh.identity.ensure_bootstrap_admin()
    if plaintext is None:
        return None
    return await asyncio.to_thread(_write_key_file, data_dir / BOOTSTRAP_KEY_FILE, plaintext)


def _write_key_file(path: Path, plaintext: str) -> Path:
    path.unlink(missing_ok=True)
    write_private_file(path, plaintext + "\n")
    return path
