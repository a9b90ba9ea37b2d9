"""The /v1 data plane in-process: real LanceDB, the hash engine, no Ray."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import datetime

import httpx
import pytest

from head.facade import Memesh
from tests.unit.conftest import ADMIN, Api, assert_error

NODE_FIELDS = {
    "id",
    "tenant_id",
    "embedding",
    "node_type",
    "cell_type",
    "content",
    "salience",
    "source_agent",
    "created_at",
    "last_accessed",
    "layer",
    "scene_id",
    "superseded_by",
}


def cell(content: str, cell_type: str = "Fact", **extra: object) -> dict[str, object]:
    return {"content": content, "cell_type": cell_type, **extra}


async def test_write_then_query_and_recall_return_hydrated_nodes(api: Api) -> None:
    key = await api.key()
    r = await api.send("POST", "/v1/cells", key, cell("we deploy the api with helm", "Decision", salience=0.8))
    assert r.status_code == 201, r.text
    node = r.json()
    assert set(node) == NODE_FIELDS
    assert node["tenant_id"] == "t1" and node["layer"] == "L2" and node["superseded_by"] is None
    assert node["node_type"]["Cell"]["project_id"] == "default"
    assert node["node_type"]["Cell"]["embedding_engine"] == "hash-384"
    assert len(node["embedding"]) == 384 and node["scene_id"]
    datetime.fromisoformat(node["created_at"].replace("Z", "+00:00"))
    assert node["created_at"].endswith("Z")
    batch = await api.send("POST", "/v1/cells:batch", key, {"cells": [cell("bananas are yellow"), cell("cats sleep a lot")]})
    assert batch.status_code == 201
    assert [n["content"] for n in batch.json()] == ["bananas are yellow", "cats sleep a lot"]
    for path in ("/v1/query", "/v1/recall"):
        r = await api.send("POST", path, key, {"text": "how do we deploy the api", "k": 2})
        assert r.status_code == 200, r.text
        nodes = r.json()
        assert nodes[0]["content"] == "we deploy the api with helm"
        assert len(nodes) == 2 and all(set(n) == NODE_FIELDS for n in nodes)
        assert all("score" not in n for n in nodes)


async def test_recall_touches_last_accessed(api: Api) -> None:
    key = await api.key()
    written = (await api.send("POST", "/v1/cells", key, cell("the cache lives in redis"))).json()
    recalled = (await api.send("POST", "/v1/recall", key, {"text": "where is the cache", "k": 1})).json()
    assert recalled[0]["id"] == written["id"]
    assert recalled[0]["last_accessed"] > written["last_accessed"]
    queried = (await api.send("POST", "/v1/query", key, {"text": "where is the cache", "k": 1})).json()
    assert queried[0]["last_accessed"] == recalled[0]["last_accessed"]


async def test_a_read_by_id_or_a_listing_right_after_a_recall_sees_its_access_time(api: Api) -> None:
    key = await api.key()
    written = (await api.send("POST", "/v1/cells", key, cell("the queue runs on rabbitmq"))).json()
    for _ in range(2):  # the second recall's access times wait in the head (no search has carried them yet)
        recalled = (await api.send("POST", "/v1/recall", key, {"text": "which queue", "k": 1})).json()
    assert recalled[0]["id"] == written["id"] and recalled[0]["last_accessed"] > written["last_accessed"]
    read = (await api.send("GET", f"/v1/cells/{written['id']}", key)).json()
    assert read["last_accessed"] == recalled[0]["last_accessed"]
    recalled = (await api.send("POST", "/v1/recall", key, {"text": "which queue", "k": 1})).json()
    listed = (await api.send("GET", "/v1/cells", key)).json()
    assert [c["last_accessed"] for c in listed["cells"]] == [recalled[0]["last_accessed"]]


async def test_filters_and_layer(api: Api) -> None:
    key = await api.key()
    await api.send(
        "POST",
        "/v1/cells:batch",
        key,
        {
            "cells": [
                cell("postgres is the primary database", "Decision"),
                cell("postgres backups run nightly", "Fact"),
                cell("postgres may fail over slowly", "Risk"),
            ]
        },
    )
    q = {"text": "postgres", "k": 10}
    only_risk = (await api.send("POST", "/v1/query", key, {**q, "filter": {"cell_types": ["Risk"]}})).json()
    assert [n["cell_type"] for n in only_risk] == ["Risk"]
    l2 = (await api.send("POST", "/v1/query", key, {**q, "layer": "L2"})).json()
    assert [n["cell_type"] for n in l2] == ["Decision"]
    other_tenant = (await api.send("POST", "/v1/query", key, {**q, "filter": {"tenant_id": "t2"}})).json()
    assert other_tenant == []
    assert len((await api.send("POST", "/v1/query", key, {**q, "filter": {"tenant_id": "t1"}})).json()) == 3


async def test_tenants_never_see_each_other(api: Api) -> None:
    k1, k2 = await api.key("t1"), await api.key("t2")
    mine = (await api.send("POST", "/v1/cells", k1, cell("tenant one secret plan"))).json()
    assert (await api.send("POST", "/v1/query", k2, {"text": "tenant one secret plan", "k": 10})).json() == []
    assert (await api.send("POST", "/v1/recall", k2, {"text": "tenant one secret plan", "k": 10})).json() == []
    assert_error(await api.send("GET", f"/v1/scenes/{mine['scene_id']}", k2), 404, "not_found")
    assert (await api.send("GET", "/v1/scenes", k2)).json() == {"scenes": [], "next_cursor": None}
    assert_error(await api.send("POST", f"/v1/scenes/{mine['scene_id']}/consolidate", k2), 404, "not_found")
    joined = await api.send("POST", "/v1/cells", k2, cell("sneaking in", scene_id=mine["scene_id"]))
    assert_error(joined, 404, "not_found")


async def test_read_scope_confines_an_agent_to_its_projects(api: Api) -> None:
    writer = await api.key()
    scoped = await api.key(roles=("Reader",), read_scope=["alpha"])
    await api.send("POST", "/v1/cells", writer, cell("alpha launch checklist", project_id="alpha"))
    beta = (await api.send("POST", "/v1/cells", writer, cell("beta launch checklist", project_id="beta"))).json()
    seen = (await api.send("POST", "/v1/query", scoped, {"text": "launch checklist", "k": 10})).json()
    assert [n["node_type"]["Cell"]["project_id"] for n in seen] == ["alpha"]
    assert_error(await api.send("GET", f"/v1/scenes/{beta['scene_id']}", scoped), 404, "not_found")
    listed = (await api.send("GET", "/v1/scenes", scoped)).json()["scenes"]
    assert {s["project_id"] for s in listed} == {"alpha"}


async def test_reader_cannot_write(api: Api) -> None:
    reader = await api.key(roles=("Reader",))
    assert_error(await api.send("POST", "/v1/cells", reader, cell("nope")), 403, "forbidden")
    assert_error(await api.send("POST", "/v1/sessions", reader, {"project_id": "p"}), 403, "forbidden")
    assert (await api.send("POST", "/v1/query", reader, {"text": "anything", "k": 1})).status_code == 200


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"cell_type": "Fact"}, 422),  # missing field
        ({"content": 5, "cell_type": "Fact"}, 422),  # wrong type
        ({"content": "x", "cell_type": "Fact", "salience": "high"}, 422),  # wrong type
        ({"content": "x", "cell_type": "Fact", "colour": "red"}, 422),  # unknown field
        ({"content": "x", "cell_type": "Fact", "salience": 1.5}, 400),  # out of range
        ({"content": "x", "cell_type": "Opinion"}, 400),  # value outside the enum
        ({"content": "x", "cell_type": 5}, 422),  # an enum given as another JSON type
        ({"content": "x", "cell_type": None}, 422),
        ({"content": "x", "cell_type": ["Fact"]}, 422),
        ({"content": "x", "cell_type": "Fact", "layer": True}, 422),
        ({"content": "x", "cell_type": "Fact", "layer": "L9"}, 400),
        ({"content": "", "cell_type": "Fact"}, 400),  # too short
        ({"content": "x", "cell_type": "Fact", "session_id": "not-a-uuid"}, 400),
        ([], 422),  # not an object
    ],
)
async def test_cell_validation(api: Api, body: object, status: int) -> None:
    key = await api.key()
    assert_error(await api.send("POST", "/v1/cells", key, body), status, "validation")


async def test_transport_level_errors(api: Api) -> None:
    key = await api.key()
    raw = await api.http.post(
        "/v1/query", content=b'{"text": ', headers={"x-service-key": key, "content-type": "application/json"}
    )
    assert_error(raw, 400, "validation")
    plain = await api.http.post("/v1/query", content=b"text=x", headers={"x-service-key": key, "content-type": "text/plain"})
    assert_error(plain, 415, "validation")
    assert_error(await api.send("POST", "/v1/query", key, {"text": "x", "k": 0}), 400, "validation")
    assert_error(await api.send("POST", "/v1/query", key, {"text": "x", "k": "3"}), 422, "validation")
    assert_error(await api.send("POST", "/v1/query", key, {"k": 3}), 422, "validation")  # a missing required field (issue 11)
    for wrong in ({"ranking": 5}, {"layer": {}}, {"filter": {"cell_types": [None]}}):  # choices as another JSON type
        assert_error(await api.send("POST", "/v1/recall", key, {"text": "x", "k": 3, **wrong}), 422, "validation")
    assert_error(await api.send("POST", "/v1/recall", key, {"text": "x", "k": 3, "ranking": "sparse"}), 400, "validation")
    assert_error(await api.send("POST", "/v1/query", key, {"embedding": [0.1, 0.2], "k": 3}), 400, "dimension_mismatch")
    vector_cell = cell("vector supplied", embedding=[0.0] * 383 + [1.0])
    assert (await api.send("POST", "/v1/cells", key, vector_cell)).status_code == 201
    assert_error(await api.send("POST", "/v1/cells", key, cell("bad", embedding=[1.0] * 3)), 400, "dimension_mismatch")
    assert_error(await api.send("GET", "/v1/scenes/not-a-uuid", key), 400, "validation")
    assert_error(await api.send("GET", "/v1/scenes/01a2040c-0000-7000-8000-000000000000", key), 404, "not_found")
    assert_error(await api.send("GET", "/v1/scenes?cursor=%%%", key), 400, "validation")
    assert_error(await api.send("GET", "/v1/no-such-thing", key), 404, "not_found")
    assert_error(await api.send("PUT", "/v1/query", key, {}), 405, "validation")


async def test_authentication_comes_first(api: Api) -> None:
    for key in (None, "", "msh_" + "x" * 43, "Bearer whatever"):
        assert_error(await api.send("POST", "/v1/query", key, {"text": "x", "k": 1}), 401, "unauthorized")
    garbage = await api.http.post("/v1/cells", content=b"{not json", headers={"content-type": "text/plain"})
    assert_error(garbage, 401, "unauthorized")
    assert (await api.http.get("/healthz")).status_code == 200


async def test_revoked_rotated_and_suspended_keys_fail_on_the_next_request(api: Api) -> None:
    memesh = api.memesh
    q = {"text": "x", "k": 1}
    for action in ("revoke", "suspend", "rotate"):
        issued = await memesh.identity.issue(ADMIN, "t1", action, ["Writer"])
        key = issued.plaintext_secret
        assert (await api.send("POST", "/v1/query", key, q)).status_code == 200  # now cached
        _, new_key = await memesh.identity.apply(ADMIN, issued.agent.id, action)
        assert_error(await api.send("POST", "/v1/query", key, q), 401, "unauthorized")
        if action == "rotate":
            assert new_key and (await api.send("POST", "/v1/query", new_key, q)).status_code == 200
        if action == "suspend":
            await memesh.identity.apply(ADMIN, issued.agent.id, "reinstate")
            assert (await api.send("POST", "/v1/query", key, q)).status_code == 200


async def test_rate_limit_answers_429_with_retry_after(make_core: Callable[..., Memesh]) -> None:
    memesh = make_core(rate_limits={"read": {"rate": 0.5, "burst": 2}})
    api = Api(memesh)
    key = await api.key()
    other = await api.key()
    assert (await api.send("POST", "/v1/query", other, {"text": "x", "k": 1})).status_code == 200  # shards loaded
    # Three at once: the bucket (2 deep, 0.5 a second) cannot refill between them however slow the machine.
    statuses = await asyncio.gather(*(api.send("POST", "/v1/query", key, {"text": "x", "k": 1}) for _ in range(3)))
    assert sorted(r.status_code for r in statuses) == [200, 200, 429]
    limited = next(r for r in statuses if r.status_code == 429)
    assert_error(limited, 429, "rate_limited")
    assert int(limited.headers["retry-after"]) >= 1
    assert (await api.send("POST", "/v1/query", other, {"text": "x", "k": 1})).status_code == 200
    await memesh.close()


async def test_sessions_give_cells_their_project(api: Api) -> None:
    key, other = await api.key(), await api.key()
    opened = await api.send("POST", "/v1/sessions", key, {"project_id": "apollo"})
    assert opened.status_code == 200
    session_id = opened.json()["session_id"]
    written = (await api.send("POST", "/v1/cells", key, cell("launch at dawn", session_id=session_id))).json()
    assert written["node_type"]["Cell"] == {**written["node_type"]["Cell"], "project_id": "apollo", "session_id": session_id}
    clash = await api.send("POST", "/v1/cells", key, cell("x", session_id=session_id, project_id="gemini"))
    assert_error(clash, 400, "validation")
    assert_error(await api.send("DELETE", f"/v1/sessions/{session_id}", other), 404, "not_found")
    assert (await api.send("DELETE", f"/v1/sessions/{session_id}", key)).json() == {"ok": True}
    assert (await api.send("DELETE", f"/v1/sessions/{session_id}", key)).json() == {"ok": True}
    assert_error(await api.send("POST", "/v1/cells", key, cell("late", session_id=session_id)), 400, "validation")
    assert_error(await api.send("DELETE", "/v1/sessions/01a2040c-0000-7000-8000-000000000000", key), 404, "not_found")
    assert_error(await api.send("POST", "/v1/sessions", key, {}), 422, "validation")


async def test_scenes_list_get_and_consolidate(api: Api) -> None:
    key = await api.key()
    texts = ["deploy the api with helm charts", "deploy the api with helm charts", "bananas are yellow", "rust is fast"]
    nodes = (await api.send("POST", "/v1/cells:batch", key, {"cells": [cell(t) for t in texts]})).json()
    dup_scene = nodes[0]["scene_id"]
    assert nodes[1]["scene_id"] == dup_scene
    pages, cursor = [], None
    for _ in range(10):
        r = (await api.send("GET", "/v1/scenes", key, params={"limit": 1, **({"cursor": cursor} if cursor else {})})).json()
        pages += r["scenes"]
        cursor = r["next_cursor"]
        if cursor is None:
            break
    assert len(pages) == len({n["scene_id"] for n in nodes}) == 3
    scene = (await api.send("GET", f"/v1/scenes/{dup_scene}", key)).json()
    assert set(scene) >= {"id", "tenant_id", "project_id", "centroid", "summary", "created_at"}
    assert scene["summary"].startswith("deploy the api with helm charts")
    for unknown in ({"x": 1}, ["x"]):  # no field is known: refused before anything changes
        assert_error(await api.send("POST", f"/v1/scenes/{dup_scene}/consolidate", key, unknown), 422, "validation")
    assert (await api.send("GET", f"/v1/scenes/{dup_scene}", key)).json()["member_count"] == scene["member_count"]
    report = await api.send("POST", f"/v1/scenes/{dup_scene}/consolidate", key)
    assert report.status_code == 200, report.text
    body = report.json()
    assert sorted(body["cells_superseded"]) == sorted([nodes[0]["id"], nodes[1]["id"]])
    (pattern,) = body["patterns_created"]
    assert pattern["layer"] == "L1" and pattern["cell_type"] == "Pattern"
    hits = (await api.send("POST", "/v1/query", key, {"text": "deploy the api with helm charts", "k": 10})).json()
    ids = [n["id"] for n in hits]
    assert pattern["id"] == ids[0] and nodes[0]["id"] not in ids and nodes[1]["id"] not in ids
    assert body["scene"]["member_count"] == 1


async def test_everything_survives_a_restart_on_the_same_data(make_core: Callable[..., Memesh]) -> None:
    first = make_core()
    api = Api(first)
    key = await api.key()
    session_id = (await api.send("POST", "/v1/sessions", key, {"project_id": "p"})).json()["session_id"]
    written = (await api.send("POST", "/v1/cells", key, cell("durable memory", session_id=session_id))).json()
    await first.close()
    second = make_core()
    api2 = Api(second)
    hits = (await api2.send("POST", "/v1/query", key, {"text": "durable memory", "k": 1})).json()
    assert hits[0]["id"] == written["id"] and hits[0]["scene_id"] == written["scene_id"]
    assert (await api2.send("GET", f"/v1/scenes/{written['scene_id']}", key)).status_code == 200
    assert (await api2.send("DELETE", f"/v1/sessions/{session_id}", key)).json() == {"ok": True}
    await second.close()


async def test_openapi_is_a_valid_3_0_3_document_of_exactly_v1(api: Api) -> None:
    from openapi_spec_validator import validate
    from openapi_spec_validator.validation import OpenAPIV30SpecValidator

    doc = (await api.http.get("/openapi.json")).json()
    assert doc["openapi"] == "3.0.3" and doc["info"]["version"] == "1.0.0"
    validate(doc, cls=OpenAPIV30SpecValidator)
    assert all(path.startswith("/v1/") for path in doc["paths"])
    assert {"/v1/cells", "/v1/cells:batch", "/v1/query", "/v1/recall", "/v1/sessions", "/v1/scenes"} <= set(doc["paths"])
    # JSON Schema 2020-12 constructs that OpenAPI 3.0 does not have must be gone, not relabelled.
    text = str(doc).replace("nullable", "")
    assert "null" not in text and "'const'" not in text and "'examples'" not in text

    def types_are_strings(node: object) -> bool:
        if isinstance(node, dict):
            return not isinstance(node.get("type"), list) and all(types_are_strings(v) for v in node.values())
        if isinstance(node, list):
            return all(types_are_strings(v) for v in node)
        return True

    assert types_are_strings(doc)
    cell_in = doc["components"]["schemas"]["CellIn"]["properties"]
    assert cell_in["session_id"]["nullable"] is True


async def test_a_chunked_body_over_the_cap_is_refused(make_core: Callable[..., Memesh]) -> None:
    from api.app import create_app

    memesh = make_core()
    api = Api(memesh)
    api.app = create_app(memesh, max_body_bytes=2048)
    api.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://memesh.test")
    key = await api.key()

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"content": "'
        for _ in range(10):
            yield b"x" * 512
        yield b'", "cell_type": "Fact"}'

    response = await api.http.post(
        "/v1/cells", content=chunks(), headers={"x-service-key": key, "content-type": "application/json"}
    )
    assert_error(response, 400, "validation")
    assert (await api.send("POST", "/v1/query", key, {"text": "x", "k": 5})).json() == []
    await memesh.close()


async def test_a_batch_with_one_bad_cell_stores_nothing(api: Api) -> None:
    key = await api.key()
    good = {"content": "a perfectly good cell", "cell_type": "Fact"}
    bad = {"content": "names a missing scene", "cell_type": "Fact", "scene_id": "01a2040c-0000-7000-8000-000000000000"}
    assert_error(await api.send("POST", "/v1/cells:batch", key, {"cells": [good, bad]}), 404, "not_found")
    assert (await api.send("POST", "/v1/query", key, {"text": "a perfectly good cell", "k": 5})).json() == []


async def test_scope_applies_to_writes_and_to_scene_pages(api: Api) -> None:
    writer = await api.key()
    scoped = await api.key(read_scope=["alpha"])
    for project in ("alpha", "beta", "alpha", "beta", "alpha"):
        await api.send(
            "POST",
            "/v1/cells",
            writer,
            {"content": f"{project} unique topic {project}", "cell_type": "Fact", "project_id": project},
        )
    outside = await api.send("POST", "/v1/cells", scoped, {"content": "x", "cell_type": "Fact", "project_id": "beta"})
    assert_error(outside, 403, "forbidden")
    assert_error(await api.send("POST", "/v1/sessions", scoped, {"project_id": "beta"}), 403, "forbidden")
    seen, cursor = [], None
    for _ in range(10):
        page = (await api.send("GET", "/v1/scenes", scoped, params={"limit": 1, **({"cursor": cursor} if cursor else {})})).json()
        seen += page["scenes"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    everything = (await api.send("GET", "/v1/scenes", writer, params={"limit": 100})).json()["scenes"]
    assert {s["id"] for s in seen} == {s["id"] for s in everything if s["project_id"] == "alpha"}
    assert seen and all(s["project_id"] == "alpha" for s in seen)


async def test_healthz_tells_no_tenant_data(api: Api) -> None:
    key = await api.key()
    await api.send("POST", "/v1/cells", key, {"content": "secret count", "cell_type": "Fact"})
    body = (await api.http.get("/healthz")).json()
    assert body["status"] == "ok" and "cells" not in body["detail"] and "agents" not in body["detail"]


async def test_a_query_with_neither_text_nor_embedding_is_a_missing_field(api: Api) -> None:
    """Spec: a body without its required field is 422; giving both is a bad value, 400."""
    key = await api.key()
    for path in ("/v1/query", "/v1/recall"):
        assert_error(await api.send("POST", path, key, {"k": 3}), 422, "validation")
        both = {"text": "x", "embedding": [1.0] * 384, "k": 3}
        assert_error(await api.send("POST", path, key, both), 400, "validation")


async def test_hybrid_ranking_fuses_keywords_and_dense_ranks_by_similarity_alone(api: Api) -> None:
    """Three cells whose vectors the client chose: the nearest vector says nothing of the keyword, the
    second nearest says it twice, the third says it with a far vector. ``dense`` is nearest first; the
    default (``hybrid``) chooses the cells with both rankings (with ``k`` 1, the cell both agree on) and
    ``recall`` puts that cell first, while ``query`` returns what was chosen nearest first, as the spec
    states its order; a query by embedding is dense."""
    from head.embedding import HashEngine

    engine = HashEngine(384)
    near, middle, far = (
        [float(x) for x in engine.encode([t])[0]] for t in ("zebra", "zebra stripes on the savanna grass", "tax forms")
    )
    key = await api.key()
    written = await api.send(
        "POST",
        "/v1/cells:batch",
        key,
        {
            "cells": [
                cell("an unrelated note about lunch", embedding=near),
                cell("the zebra report: zebra counts rose", embedding=middle),
                cell("a zebra crossing was painted", embedding=far),
            ]
        },
    )
    assert written.status_code == 201, written.text
    lunch, report, crossing = (n["id"] for n in written.json())
    for path in ("/v1/query", "/v1/recall"):
        dense = (await api.send("POST", path, key, {"text": "zebra", "k": 3, "ranking": "dense"})).json()
        assert [n["id"] for n in dense] == [lunch, report, crossing], path
        hybrid = (await api.send("POST", path, key, {"text": "zebra", "k": 3})).json()
        assert [n["id"] for n in hybrid] == [lunch, report, crossing] if path == "/v1/query" else hybrid[0]["id"] == report, path
        assert {n["id"] for n in hybrid} == {lunch, report, crossing}
        by_vector = (await api.send("POST", path, key, {"embedding": near, "k": 3, "ranking": "hybrid"})).json()
        assert [n["id"] for n in by_vector] == [lunch, report, crossing], path
    for path in ("/v1/query", "/v1/recall"):  # which cells answer is the fusion's choice
        narrow = (await api.send("POST", path, key, {"text": "zebra", "k": 1})).json()
        assert [n["id"] for n in narrow] == [report], path
    for bad in ("bm25", "", "Dense"):  # a value outside the enum is 400, as for cell_type (docs/decisions.md)
        assert_error(await api.send("POST", "/v1/query", key, {"text": "zebra", "k": 3, "ranking": bad}), 400, "validation")
    default = await api.send("POST", "/v1/query", key, {"text": "zebra", "k": 3, "ranking": None})
    asked = await api.send("POST", "/v1/query", key, {"text": "zebra", "k": 3, "ranking": "hybrid"})
    assert [n["id"] for n in default.json()] == [n["id"] for n in asked.json()]  # null: the server's default


async def test_the_default_ranking_is_a_setting(make_core: Callable[..., Memesh]) -> None:
    from head.embedding import HashEngine

    memesh = make_core(retrieval={"ranking": "dense"})
    try:
        api = Api(memesh)
        engine = HashEngine(384)
        near, middle = ([float(x) for x in engine.encode([t])[0]] for t in ("zebra", "zebra stripes on the savanna"))
        key = await api.key()
        body = {"cells": [cell("lunch", embedding=near), cell("zebra zebra", embedding=middle)]}
        lunch, _ = (n["id"] for n in (await api.send("POST", "/v1/cells:batch", key, body)).json())
        assert (await api.send("POST", "/v1/query", key, {"text": "zebra", "k": 1})).json()[0]["id"] == lunch
        asked = await api.send("POST", "/v1/query", key, {"text": "zebra", "k": 1, "ranking": "hybrid"})
        assert asked.json()[0]["id"] != lunch
    finally:
        await memesh.close()


async def test_a_query_of_thousands_of_distinct_words_is_answered(api: Api) -> None:
    """The longest text, every word distinct: the lexical side scores its first 64 terms, so it costs what a
    short query does, and the answer is an ordinary 200."""
    key = await api.key()
    words = [f"k{i}z" for i in range(2_000)]
    cells = [cell(" ".join(words[i : i + 40])) for i in range(0, 2_000, 40)]
    assert (await api.send("POST", "/v1/cells:batch", key, {"cells": cells})).status_code == 201
    text = " ".join(words)[:8_192]
    for path in ("/v1/query", "/v1/recall"):
        reply = await api.send("POST", path, key, {"text": text, "k": 1_000})
        assert reply.status_code == 200, reply.text
        assert len(reply.json()) == len(cells)


async def test_a_405_allows_every_method_the_document_gives_its_path(api: Api) -> None:
    """RFC 9110: a 405 names in ``Allow`` the methods the resource supports. A path served by several routes
    (``GET`` and ``POST /v1/cells``) named only the first route's method, unlike ``/openapi.json``."""
    key = await api.key()
    document = (await api.http.get("/openapi.json")).json()
    for path, template in (
        ("/v1/cells", "/v1/cells"),
        ("/v1/cells/01a2040c-0000-7000-8000-000000000000", "/v1/cells/{cell_id}"),
        ("/v1/query", "/v1/query"),
    ):
        documented = {m.upper() for m in document["paths"][template]}
        for method in ("OPTIONS", "PUT", "PATCH"):
            if method in documented:
                continue
            response = await api.send(method, path, key, {})
            assert_error(response, 405, "validation")
            assert {m.strip() for m in response.headers["allow"].split(",")} == documented, (method, path)


async def test_the_stream_path_over_plain_http_is_refused_as_such(api: Api) -> None:
    """``/v1/inbox`` is the WebSocket stream. Over plain HTTP it answered 404, as if the path did not exist:
    a GET without the upgrade is 400 ``validation`` saying how to open it, another method 405 with
    ``Allow: GET``; without a key, 401 first as everywhere under /v1; it is no operation of the document."""
    key = await api.key()
    plain = await api.send("GET", "/v1/inbox", key)
    assert_error(plain, 400, "validation")
    assert "WebSocket" in plain.json()["error"]["message"]
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        response = await api.send(method, "/v1/inbox", key, {})
        assert_error(response, 405, "validation")
        assert "GET" in {m.strip() for m in response.headers["allow"].split(",")}
    assert_error(await api.http.get("/v1/inbox"), 401, "unauthorized")
    assert "/v1/inbox" not in (await api.http.get("/openapi.json")).json()["paths"]
