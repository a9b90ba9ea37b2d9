"""What a caller sends, as an attacker holding a key would send it: bounds, costs, oracles.

Each test names the finding of the 2026-11-23 review (../shared/reference/security-review.md)
it would have caught. In process: real LanceDB under tmp_path, the hash engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from api.app import create_app
from api.console.gate import SESSION_COOKIE
from cluster.settings import Settings
from head.embedding import Embedder, HashEngine, Matrix
from head.facade import Memesh
from head.observatory_hub import ObservatoryHub, ObservatoryHubConfig
from mesh.console_sessions import PendingLogin, PendingLogins, address_owner
from mesh.errors import QuotaExceeded, RateLimited, ValidationFailed
from mesh.identity import Principal, Role, hash_key
from mesh.ratelimit import BucketPolicy, TokenBuckets
from mesh.seam import beacon_set_index
from mesh.sharding import partition_key, shard_for
from mesh.vector_index import VectorIndex
from tests.unit.conftest import ADMIN, Api, assert_error
from tests.unit.test_admin_gate import CONFIG

DIMS = 384


async def test_a_beacon_expiry_is_bounded_and_the_next_start_loads_it(make_core: Callable[..., Memesh]) -> None:
    """C1: ``9999-12-31T23:59:59-23:59`` was accepted and bricked the beacon set on its next load."""
    core = make_core()
    api = Api(core)
    key = await api.key(roles=("Reader",))
    for expires_at in ("9999-12-31T23:59:59-23:59", "9999-12-31T23:59:59+00:00", "2200-01-01T00:00:00Z"):
        assert_error(await api.send("POST", "/v1/beacons", key, {"interest": "x", "expires_at": expires_at}), 400, "validation")
    for ttl in (0.001, 1e12):
        assert_error(await api.send("POST", "/v1/beacons", key, {"interest": "x", "ttl_s": ttl}), 400, "validation")
    next_year = datetime.now(UTC).year + 1  # spec 2: times are RFC 3339 strings
    for not_a_time, status in (
        (datetime.now(UTC).timestamp() + 3600, 422),  # a number: the wrong JSON type
        (str(int(datetime.now(UTC).timestamp()) + 3600), 400),  # epoch seconds as a string
        (f"{next_year}-01-01T00:00:00", 400),  # no offset
        (f"{next_year}-01-01", 400),  # a date alone
        (f"{next_year}-01-01T00:00:00 05:00", 400),  # a space for the offset's sign (only a query string decodes "+" so)
    ):
        body = {"interest": "x", "expires_at": not_a_time}
        assert_error(await api.send("POST", "/v1/beacons", key, body), status, "validation")
    soon = datetime.now(UTC).replace(microsecond=0).year + 1
    placed = await api.send("POST", "/v1/beacons", key, {"interest": "x", "expires_at": f"{soon}-01-01T00:00:00-05:00"})
    assert placed.status_code == 200, placed.text
    principal = await core.identity.authenticate(key)
    ref = core.directory.beacon_set(beacon_set_index(core.directory, principal.agent_id))
    (stored,) = await ref.list_for(principal.tenant_id, principal.agent_id, datetime.now(UTC))
    assert stored.expires_at == datetime(soon, 1, 1, 5, tzinfo=UTC) and stored.expires_at.tzinfo is UTC
    await api.http.aclose()
    await core.close()
    again = make_core()  # the next start on the same data
    health = await again.health()
    assert health["beacons"] == 1 and health["skipped_rows"] == 0
    await again.close()


async def test_client_vectors_of_extreme_scale_are_stored_unit_length(api: Api) -> None:
    """L5: ``[1e30]*n`` and ``[1e-40]*n`` passed the check, then normalised to the zero vector."""
    key = await api.key()
    for value in (1e30, 1e-40, 1e300, 5e-324):
        written = await api.send(
            "POST", "/v1/cells", key, {"content": f"scale {value}", "cell_type": "Fact", "embedding": [value] * DIMS}
        )
        assert written.status_code == 201, written.text
        assert np.linalg.norm(written.json()["embedding"]) == pytest.approx(1.0, abs=1e-3)
    assert_error(
        await api.send("POST", "/v1/cells", key, {"content": "zero", "cell_type": "Fact", "embedding": [0.0] * DIMS}),
        400,
        "validation",
    )
    found = await api.send("POST", "/v1/query", key, {"embedding": [1.0] * DIMS, "k": 10})
    assert len(found.json()) == 4


def test_thousands_of_tied_vectors_cost_no_python_sort() -> None:
    """L6: every row tied with the k-th came back and was sorted in Python on the shard's loop."""
    index = VectorIndex(8, capacity=16)
    vector = np.ones(8, dtype=np.float32) / np.sqrt(8)
    ids = [f"00000000-0000-7000-8000-{n:012d}" for n in range(20_000)]
    for node_id in reversed(ids):
        index.upsert(node_id, vector)
    started = time.process_time()  # this process's CPU: another test process on the same cores does not count
    hits = index.search(vector, 10)
    many = index.search_many(np.stack([vector, vector]), 10)
    elapsed = time.process_time() - started
    assert [h[0] for h in hits] == ids[:10] and [h[0] for h in many[1]] == ids[:10]
    assert elapsed < 0.5, elapsed  # a Python sort of 20k tied ids per query took seconds here


async def test_a_batch_spanning_shards_is_refused_whole(api: Api) -> None:
    """M6: one shard refused a bad ``scene_id`` (404) after the other shard had committed its cells."""
    key = await api.key()
    principal = await api.memesh.identity.authenticate(key)
    projects = [f"p{i}" for i in range(50)]
    a = next(p for p in projects if shard_for(partition_key(principal.tenant_id, p), 2) == 0)
    b = next(p for p in projects if shard_for(partition_key(principal.tenant_id, p), 2) == 1)
    body = {
        "cells": [
            {"content": "the first half of a batch", "cell_type": "Fact", "project_id": a},
            {"content": "y", "cell_type": "Fact", "project_id": b, "scene_id": "0199a1b2-0000-7000-8000-000000000001"},
        ]
    }
    assert_error(await api.send("POST", "/v1/cells:batch", key, body), 404, "not_found")
    assert (await api.send("POST", "/v1/query", key, {"text": "the first half of a batch", "k": 5})).json() == []


async def test_a_batch_is_charged_per_cell(make_core: Callable[..., Memesh]) -> None:
    """H5: ``cells:batch`` of 256 texts cost one token, like a single cell."""
    core = make_core(rate_limits={"write": {"rate": 0.01, "burst": 12}})
    api = Api(core)
    key = await api.key()
    batch = {"cells": [{"content": f"cell {n}", "cell_type": "Fact"} for n in range(8)]}
    assert (await api.send("POST", "/v1/cells:batch", key, batch)).status_code == 201
    refused = await api.send("POST", "/v1/cells:batch", key, batch)
    assert_error(refused, 429, "rate_limited")
    assert int(refused.headers["retry-after"]) >= 1
    await api.http.aclose()
    await core.close()


class Recording(HashEngine):
    """The real hash engine, recording what each encode call was given (to see batches form)."""

    def __init__(self) -> None:
        super().__init__(DIMS)
        self.batches: list[list[str]] = []

    def encode(self, texts: list[str]) -> Matrix:
        self.batches.append(list(texts))
        time.sleep(0.01)
        return super().encode(texts)


async def test_the_embedding_queue_is_fair_bounded_and_drops_abandoned_work() -> None:
    """H5: one FIFO queue for every tenant, unbounded, still encoding texts whose request had timed out."""
    engine = Recording()
    embedder = Embedder(engine, max_batch=64, max_queued=2_000, max_queued_per_owner=700)
    flood = [asyncio.create_task(embedder.embed([f"flood {n}.{i}" for i in range(64)], "tenant-a")) for n in range(10)]
    await asyncio.sleep(0)
    with pytest.raises(RateLimited):  # past tenant-a's share (700 texts): refused at once, never queued
        await embedder.embed([f"more {i}" for i in range(200)], "tenant-a")
    other = asyncio.create_task(embedder.embed(["the other tenant's query"], "tenant-b"))
    abandoned = asyncio.create_task(embedder.embed(["nobody waits for this"], "tenant-c"))
    await asyncio.sleep(0)
    abandoned.cancel()
    await asyncio.gather(other, *flood)
    position = next(n for n, batch in enumerate(engine.batches) if "the other tenant's query" in batch)
    assert position <= 2, position  # behind about one batch, not behind ten
    assert all("nobody waits for this" not in batch for batch in engine.batches)
    assert embedder.dropped == 1 and embedder.queued == 0
    embedder.close()


async def test_bogus_keys_are_cached_and_throttled_per_address(make_core: Callable[..., Memesh]) -> None:
    """L4: a key shaped like ``msh_...`` cost a Registry round trip every time, with no throttle."""
    core = make_core(rate_limits={"auth_failures": {"rate": 0.01, "burst": 5}})
    registry = core.directory.registry().target  # type: ignore[attr-defined]
    calls = 0
    original = registry.authenticate

    refused: set[str] = set()

    async def counting(key_hash: str) -> Any:
        nonlocal calls
        calls += 1
        return None if key_hash in refused else await original(key_hash)

    api = Api(core)
    good = await api.key()
    assert (await api.send("POST", "/v1/query", good, {"text": "x"})).status_code == 200
    registry.authenticate = counting
    bogus = "msh_" + "x" * 43
    for _ in range(5):
        assert_error(await api.send("POST", "/v1/query", bogus, {"text": "x"}), 401, "unauthorized")
    assert calls == 1  # the refusal is remembered
    limited = await api.send("POST", "/v1/query", bogus, {"text": "x"})
    assert_error(limited, 429, "rate_limited")
    assert calls == 1
    # The same address's valid key is not refused for its neighbour's guessing,
    assert (await api.send("POST", "/v1/query", good, {"text": "x"})).status_code == 200
    core.identity._cache.clear()  # also once its cache entry expired (every principal_cache_ttl_s)
    assert (await api.send("POST", "/v1/query", good, {"text": "x"})).status_code == 200
    assert calls == 2  # looked up again, not refused unasked
    # while a key this head never saw work waits for the address's bucket, and a vouched key once refused loses it.
    fresh = await api.key()
    assert_error(await api.send("POST", "/v1/query", fresh, {"text": "x"}), 429, "rate_limited")
    core.identity._cache.clear()
    refused.add(hash_key(good))  # the registry refuses it now (as after a revoke at another head)
    assert_error(await api.send("POST", "/v1/query", good, {"text": "x"}), 401, "unauthorized")
    assert_error(await api.send("POST", "/v1/query", good, {"text": "x"}), 429, "rate_limited")
    await api.http.aclose()
    await core.close()


async def test_healthz_answers_from_one_actor_round(make_core: Callable[..., Memesh]) -> None:
    """L1: every unauthenticated /healthz called every actor."""
    core = make_core()
    shard = core.directory.scene_shard(0).target  # type: ignore[attr-defined]
    calls = 0
    original = shard.health

    async def counting() -> Any:
        nonlocal calls
        calls += 1
        return await original()

    shard.health = counting
    api = Api(core)
    answers = await asyncio.gather(*(api.http.get("/healthz") for _ in range(50)))
    assert all(a.status_code == 200 for a in answers)
    assert calls == 1
    await api.http.aclose()
    await core.close()


def test_a_flood_of_new_callers_does_not_reset_anyone_else() -> None:
    """M3: at 100k keys every bucket was cleared, handing every agent a full burst again."""
    buckets = TokenBuckets({"Read": BucketPolicy(rate=0.001, burst=2)}, max_keys=1_000)
    buckets.charge("Read", "victim", 0.0, cost=2)
    with pytest.raises(RateLimited):
        buckets.charge("Read", "victim", 0.0)
    for n in range(5_000):
        buckets.charge("Read", f"flood-{n}", 0.0)
        if n % 100 == 0:
            with pytest.raises(RateLimited):  # the victim, refused again, stays the most recent
                buckets.charge("Read", "victim", 0.0)
    assert len(buckets) <= 1_000


def test_one_address_cannot_fill_the_pending_logins() -> None:
    """M3: 10,000 pending logins from one address locked every operator out for 10 minutes."""
    now = datetime.now(UTC)
    pending = PendingLogins(ttl_s=600, capacity=100, per_owner=8)
    attacker = address_owner("2001:db8::1")
    for n in range(500):
        pending.put(f"state-{n}", PendingLogin("n", "v", "r"), now, owner=address_owner(f"2001:db8::{n:x}"))
    assert len(pending) <= 8 and attacker == address_owner("2001:db8::ffff")
    pending.put("operator", PendingLogin("n", "v", "r"), now, owner=address_owner("192.0.2.7"))
    assert pending.take("operator", now) is not None


async def test_logout_refuses_another_origin(make_core: Callable[..., Memesh]) -> None:
    """L9: ``POST /admin/auth/logout`` had no Origin check (a same-site page could log operators out)."""
    core = make_core()
    app = create_app(core, console=CONFIG)
    agent = (await core.identity.issue(ADMIN, "acme", "op", ["ProjectAdmin"], oidc_subject="op")).agent
    token, _ = await app.state.console.sessions.open(agent.id, "op", datetime.now(UTC))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://memesh.test") as http:
        cookie = {"cookie": f"{SESSION_COOKIE}={token}"}
        refused = await http.post("/admin/auth/logout", headers={**cookie, "origin": "http://evil.example"})
        assert_error(refused, 403, "forbidden")
        assert (await http.get("/admin/api/me", headers=cookie)).status_code == 200
        assert (await http.post("/admin/auth/logout", headers={**cookie, "origin": "http://memesh.test"})).status_code == 204
        assert (await http.get("/admin/api/me", headers=cookie)).status_code == 401
    await core.close()


async def test_one_tenant_cannot_hold_every_observatory_stream(core: Memesh) -> None:
    """L2: the 16-stream cap was global; one ProjectAdmin could hold every slot."""
    hub = ObservatoryHub(core.directory, ObservatoryHubConfig(max_streams=6, max_streams_per_tenant=2))
    subs = [await hub.subscribe("acme"), await hub.subscribe("acme")]
    with pytest.raises(QuotaExceeded, match="per tenant"):
        await hub.subscribe("acme")
    subs += [await hub.subscribe("other"), await hub.subscribe(None), await hub.subscribe(None)]
    subs[0].close()
    subs.append(await hub.subscribe("acme"))  # a slot came back
    for sub in subs:
        sub.close()
    await hub.close()


def test_one_tenant_cannot_hold_every_inbox_stream(core: Memesh) -> None:
    """A tenant's admin mints agents; with only a per-agent cap, 64 of them at 4 streams each held
    every slot of a head and no other tenant could open a stream."""
    service = core.inbox
    service.limits = dataclasses.replace(service.limits, max_streams_per_agent=2, max_streams_per_tenant=3, max_streams=5)
    greedy = [Principal(f"a{i}", "greedy", frozenset({Role.READER})) for i in range(3)]
    with contextlib.ExitStack() as held:
        for principal in (greedy[0], greedy[0], greedy[1]):
            held.enter_context(service.stream_slot(principal))
        with pytest.raises(QuotaExceeded, match="an agent"):
            held.enter_context(service.stream_slot(greedy[0]))
        with pytest.raises(QuotaExceeded, match="a tenant"):
            held.enter_context(service.stream_slot(greedy[2]))
        other = Principal("b0", "other", frozenset({Role.READER}))
        held.enter_context(service.stream_slot(other))
        held.enter_context(service.stream_slot(other))
        with pytest.raises(QuotaExceeded, match="maximum"):
            held.enter_context(service.stream_slot(Principal("c0", "third", frozenset({Role.READER}))))
        assert service.open_streams == 5
    assert service.open_streams == 0
    with service.stream_slot(greedy[2]):  # the slots came back
        assert service.open_streams == 1


def test_production_refuses_plaintext_grpc_beyond_loopback(tmp_path: Path) -> None:
    """L3: nothing refused a non-loopback ``server.grpc_host`` in production: admin keys in clear text."""
    with pytest.raises(ValueError, match="gRPC admin service in plaintext"):
        Settings(profile="production", server={"grpc_host": "0.0.0.0"})
    cert = tmp_path / "c.pem"
    ok = Settings(profile="production", server={"grpc_host": "0.0.0.0", "grpc_tls_certfile": cert, "grpc_tls_keyfile": cert})
    assert ok.server.grpc_tls
    assert Settings(profile="production", server={"grpc_host": "::1"}).server.grpc_loopback


async def test_metrics_can_require_a_bearer_token(make_core: Callable[..., Memesh]) -> None:
    """L1: /metrics published every tenant's aggregate activity to anyone; it can now need a token."""
    core = make_core()
    app = create_app(core, metrics_token="s3cret-scraper")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://memesh.test") as http:
        assert_error(await http.get("/metrics"), 401, "unauthorized")
        assert_error(await http.get("/metrics", headers={"authorization": "Bearer wrong"}), 401, "unauthorized")
        answer = await http.get("/metrics", headers={"authorization": "Bearer s3cret-scraper"})
        assert answer.status_code == 200 and "memesh_storage_rows_skipped 0.0" in answer.text
    await core.close()


async def test_a_batch_past_the_limit_is_refused_before_it_is_charged(make_core: Callable[..., Memesh]) -> None:
    """A batch over ``limits.max_batch_cells`` took its Write tokens first: 5000 cells were told 429 and to
    retry (no retry could succeed), and 257 drained the bucket so the next valid batch was refused."""
    core = make_core(rate_limits={"write": {"rate": 0.001, "burst": 300}})
    api = Api(core)
    key = await api.key()

    def batch(n: int) -> dict[str, Any]:
        return {"cells": [{"content": f"note {i}", "cell_type": "Fact"} for i in range(n)]}

    for size in (5000, 257):
        refused = await api.send("POST", "/v1/cells:batch", key, batch(size))
        assert_error(refused, 400, "validation")
        assert "at most 256 cells per batch" in refused.json()["error"]["message"]
    assert (await api.send("POST", "/v1/cells:batch", key, batch(256))).status_code == 201  # the bucket was untouched
    await api.http.aclose()
    await core.close()


async def test_a_page_size_is_written_in_decimal_digits(api: Api) -> None:
    """``limit=3_0`` listed 30, ``2.0`` 2 and ``+3`` 3: pydantic's lax parsing of a query-string integer."""
    key = await api.key()
    for loose in ("3_0", "2.0", "+3", "1e2"):
        for path in ("/v1/cells", "/v1/scenes"):
            assert_error(await api.send("GET", path, key, params={"limit": loose}), 400, "validation")
    assert (await api.send("GET", "/v1/cells", key, params={"limit": "3"})).status_code == 200


async def test_a_trailing_slash_is_a_404_in_the_envelope_never_a_redirect(api: Api) -> None:
    """``POST /v1/query/`` answered 307 with an empty body and ``Location: http://...``: not the envelope, and a
    client behind a TLS proxy that follows it sends its key and body in plaintext."""
    key = await api.key()
    for method, path in (("POST", "/v1/query/"), ("POST", "/v1/recall/"), ("GET", "/v1/cells/"), ("POST", "/v1/inbox:pull/")):
        refused = await api.send(method, path, key, {"text": "x", "k": 1} if method == "POST" else None)
        assert_error(refused, 404, "not_found")
        assert "location" not in refused.headers
    assert (await api.send("POST", "/v1/query", key, {"text": "x", "k": 1})).status_code == 200


async def test_a_request_with_two_keys_is_refused_whichever_comes_first(api: Api) -> None:
    """REST read the last of two ``x-service-key`` headers, the WebSocket handshake and gRPC the first: the
    same request was one tenant on one door and another tenant on the next. A request sends one key."""
    key, other = await api.key("t1"), await api.key("t2")
    for pair in ([key, other], [other, key], [key, key]):
        headers = [("x-service-key", k) for k in pair]
        refused = await api.http.request("POST", "/v1/query", json={"text": "x", "k": 1}, headers=headers)
        assert_error(refused, 401, "unauthorized")
    mcp = [("authorization", f"Bearer {key}"), ("authorization", f"Bearer {other}")]
    refused = await api.http.request("POST", "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=mcp)
    assert_error(refused, 401, "unauthorized")
    beside = [("x-service-key", key), ("authorization", "Bearer a-proxy-token"), ("authorization", "Basic b")]
    assert (await api.http.request("POST", "/v1/query", json={"text": "x", "k": 1}, headers=beside)).status_code == 200


async def test_a_new_project_or_tenant_is_not_blank_nor_padded(api: Api) -> None:
    """``"project_id": " "`` wrote a cell and opened a session: a project that looks like none (and ``"p "``
    one that looks like ``p``). A filter may still name any printable project, as stored data may hold one."""
    key = await api.key()
    for project in (" ", "  ", "p ", " p", "\u3000"):
        assert_error(
            await api.send("POST", "/v1/cells", key, {"content": "x", "cell_type": "Fact", "project_id": project}),
            400,
            "validation",
        )
        assert_error(await api.send("POST", "/v1/sessions", key, {"project_id": project}), 400, "validation")
    assert (
        await api.send("POST", "/v1/cells", key, {"content": "x", "cell_type": "Fact", "project_id": "a b"})
    ).status_code == 201
    assert (await api.send("GET", "/v1/scenes", key, params={"project_id": " "})).status_code == 200
    with pytest.raises(ValidationFailed):
        await api.memesh.identity.issue(ADMIN, " ", "padded", ["Writer"])
    with pytest.raises(ValidationFailed):
        await api.memesh.identity.issue(ADMIN, "t1", "scoped", ["Reader"], [" "])


async def test_a_cursor_is_exactly_as_issued(api: Api) -> None:
    """``next_cursor + "=="`` listed the same page: the decoder took padding and skipped characters outside
    base64url, so a cursor had many spellings though decisions.md says it is the unpadded form."""
    key = await api.key()
    for n in range(3):
        await api.send("POST", "/v1/cells", key, {"content": f"cell {n}", "cell_type": "Fact"})
    cursor = (await api.send("GET", "/v1/cells", key, params={"limit": 1})).json()["next_cursor"]
    assert (await api.send("GET", "/v1/cells", key, params={"limit": 1, "cursor": cursor})).status_code == 200
    for spelling in (cursor + "==", cursor + "=", f"!{cursor}", f"{cursor[:4]}.{cursor[4:]}", cursor.upper()):
        assert_error(await api.send("GET", "/v1/cells", key, params={"limit": 1, "cursor": spelling}), 400, "validation")


async def test_a_read_of_many_nodes_costs_a_read_token_per_hundred(make_core: Callable[..., Memesh]) -> None:
    """A recall of k=1000 cost one Read token as k=10 did, for about eleven times the CPU (27 ms against 2.5 with
    the hash engine, rendering a thousand nodes): one Reader at the read rate took every core from the others."""
    core = make_core(rate_limits={"read": {"rate": 0.001, "burst": 25}})
    api = Api(core)
    key = await api.key()
    await api.send("POST", "/v1/cells:batch", key, {"cells": [{"content": f"cell {n}", "cell_type": "Fact"} for n in range(5)]})
    for _ in range(2):
        assert (await api.send("POST", "/v1/recall", key, {"text": "cell", "k": 1000})).status_code == 200  # 10 each
    refused = await api.send("POST", "/v1/query", key, {"text": "cell", "k": 1000})  # 10 of 5 left
    assert_error(refused, 429, "rate_limited")  # (its admission's one token is spent, as any request's)
    assert int(refused.headers["retry-after"]) >= 1
    assert (await api.send("POST", "/v1/query", key, {"text": "cell", "k": 100})).status_code == 200  # one of 4
    assert_error(await api.send("GET", "/v1/cells", key, params={"limit": 400}), 429, "rate_limited")  # 4 of 3
    assert (await api.send("GET", "/v1/scenes", key, params={"limit": 200})).status_code == 200  # 2 of 2
    assert_error(await api.send("GET", "/v1/cells", key, params={"limit": 10}), 429, "rate_limited")
    await core.close()
