"""Cells an agent manages by id (GET/DELETE /v1/cells/{id}, GET /v1/cells) in-process: real LanceDB, hash engine."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from mesh.errors import StorageUnavailable
from tests.unit.conftest import Api, assert_error


def cell(content: str, cell_type: str = "Fact", **extra: object) -> dict[str, object]:
    return {"content": content, "cell_type": cell_type, **extra}


async def write(api: Api, key: str, content: str, **extra: object) -> dict[str, Any]:
    r = await api.send("POST", "/v1/cells", key, cell(content, **extra))
    assert r.status_code == 201, r.text
    node: dict[str, Any] = r.json()
    return node


async def pages(api: Api, key: str, limit: int, **params: Any) -> list[list[str]]:
    """Every page of GET /v1/cells, as lists of ids."""
    seen: list[list[str]] = []
    cursor = None
    for _ in range(1000):  # bounded: a listing that never ends fails the test
        r = await api.send("GET", "/v1/cells", key, params={"limit": limit, **params, **({"cursor": cursor} if cursor else {})})
        assert r.status_code == 200, r.text
        body = r.json()
        assert set(body) == {"cells", "next_cursor"}
        seen.append([n["id"] for n in body["cells"]])
        cursor = body["next_cursor"]
        if cursor is None:
            return seen
    raise AssertionError("the listing never ended")


async def test_the_writer_reads_lists_and_deletes_its_cell_and_it_leaves_every_read(api: Api) -> None:
    key = await api.key()
    mine = await write(api, key, "the billing service retries payments three times", salience=0.7)
    other = await write(api, key, "the search service caches results for a minute")
    got = await api.send("GET", f"/v1/cells/{mine['id']}", key)
    assert got.status_code == 200 and got.json() == mine
    listed = (await api.send("GET", "/v1/cells", key)).json()
    assert listed == {"cells": sorted([mine, other], key=lambda n: n["id"]), "next_cursor": None}

    deleted = await api.send("DELETE", f"/v1/cells/{mine['id']}", key)
    assert deleted.status_code == 200 and deleted.json() == {"ok": True}
    assert_error(await api.send("GET", f"/v1/cells/{mine['id']}", key), 404, "not_found")
    again = await api.send("DELETE", f"/v1/cells/{mine['id']}", key)
    assert again.status_code == 200 and again.json() == {"ok": True}, "spec 3: a second delete succeeds as a no-op"
    for path in ("/v1/query", "/v1/recall"):
        for ranking in ("hybrid", "dense"):
            body = {"text": "billing service retries payments", "k": 10, "ranking": ranking}
            found = (await api.send("POST", path, key, body)).json()
            assert [n["id"] for n in found] == [other["id"]], (path, ranking)
    assert [n["id"] for n in (await api.send("GET", "/v1/cells", key)).json()["cells"]] == [other["id"]]
    rows = await api.memesh.directory.audit_log().rows(0, 1000)
    (row,) = [r for r in rows if r.kind == "NodeDeleted" and r.target == mine["id"]]  # the no-op records nothing
    assert json.loads(row.detail)["reason"] == "user_delete" and row.outcome == "ok"


async def test_teammates_read_but_only_the_writer_or_an_admin_deletes(api: Api) -> None:
    writer, teammate = await api.key(), await api.key()
    reader, admin = await api.key(roles=("Reader",)), await api.key(roles=("ProjectAdmin",))
    first = await write(api, writer, "the release train leaves on thursdays")
    second = await write(api, writer, "hotfixes skip the release train")
    assert (await api.send("GET", f"/v1/cells/{first['id']}", teammate)).json() == first
    assert (await api.send("GET", f"/v1/cells/{first['id']}", reader)).json() == first
    assert_error(await api.send("DELETE", f"/v1/cells/{first['id']}", teammate), 403, "forbidden")
    assert_error(await api.send("DELETE", f"/v1/cells/{first['id']}", reader), 403, "forbidden")
    assert (await api.send("GET", f"/v1/cells/{first['id']}", writer)).status_code == 200  # refused: nothing changed
    assert (await api.send("DELETE", f"/v1/cells/{first['id']}", admin)).json() == {"ok": True}
    assert (await api.send("DELETE", f"/v1/cells/{second['id']}", writer)).json() == {"ok": True}
    assert (await api.send("GET", "/v1/cells", reader)).json() == {"cells": [], "next_cursor": None}
    assert_error(await api.send("DELETE", f"/v1/cells/{second['id']}", teammate), 404, "not_found")  # gone for others
    assert (await api.send("DELETE", f"/v1/cells/{first['id']}", writer)).json() == {"ok": True}  # the admin's: a no-op


async def test_a_second_delete_meeting_the_first_commit_answers_with_its_outcome(api: Api) -> None:
    """Two deletes of one cell at once: the second meets the tombstone whose commit is still in flight. It must
    not acknowledge before that commit is durable; when that commit fails, the second deletes the cell itself."""
    key = await api.key()
    written = await write(api, key, "the cache is flushed nightly")
    shard = next(
        s.target  # type: ignore[attr-defined]
        for s in (api.memesh.directory.scene_shard(0), api.memesh.directory.scene_shard(1))
        if written["id"] in s.target.partition.cells  # type: ignore[attr-defined]
    )
    committer = shard._commit
    real = committer._flush
    calls = []

    async def failing_once(rows):  # type: ignore[no-untyped-def]
        tombstoned = {getattr(r, "id", None) for r in rows if getattr(r, "tombstone", False)}
        if written["id"] in tombstoned:  # not another commit (the write's row, committed behind its journal)
            calls.append(tombstoned)
            await asyncio.sleep(0.05)  # the second delete arrives while this commit is in flight
            if len(calls) == 1:
                raise StorageUnavailable("storage failed during a commit")
        await real(rows)

    committer._flush = failing_once
    first, second = await asyncio.gather(
        api.send("DELETE", f"/v1/cells/{written['id']}", key), api.send("DELETE", f"/v1/cells/{written['id']}", key)
    )
    assert sorted([first.status_code, second.status_code]) == [200, 503], (first.text, second.text)
    assert written["id"] in calls[0] and any(written["id"] in c for c in calls[1:]), (
        "the second delete acknowledged a tombstone whose commit failed"
    )
    assert_error(await api.send("GET", f"/v1/cells/{written['id']}", key), 404, "not_found")


async def test_another_tenant_and_another_scope_see_a_missing_cell(api: Api) -> None:
    owner = await api.key("t1")
    stranger = await api.key("t2", roles=("ProjectAdmin",))
    scoped = await api.key("t1", roles=("Reader",), read_scope=["alpha"])
    alpha = await write(api, owner, "alpha launches in may", project_id="alpha")
    beta = await write(api, owner, "beta launches in june", project_id="beta")
    for method in ("GET", "DELETE"):
        assert_error(await api.send(method, f"/v1/cells/{alpha['id']}", stranger), 404, "not_found")
        assert_error(await api.send(method, f"/v1/cells/{beta['id']}", scoped), 404, "not_found")
        assert_error(await api.send(method, "/v1/cells/01a2040c-0000-7000-8000-000000000000", owner), 404, "not_found")
    assert (await api.send("GET", "/v1/cells", stranger)).json() == {"cells": [], "next_cursor": None}
    assert [n["id"] for n in (await api.send("GET", "/v1/cells", scoped)).json()["cells"]] == [alpha["id"]]
    for odd in ("\x00", "a\nb"):  # as /v1/scenes and a write refuse them
        assert_error(await api.send("GET", "/v1/cells", owner, params={"project_id": odd}), 400, "validation")
    beta_only = await api.send("GET", "/v1/cells", scoped, params={"project_id": "beta"})
    assert beta_only.json() == {"cells": [], "next_cursor": None}
    assert (await api.send("GET", f"/v1/cells/{beta['id']}", owner)).status_code == 200  # refusals changed nothing


async def test_keyset_pages_cover_every_cell_once_across_shards_and_filters_apply(api: Api) -> None:
    assert api.memesh.directory.spec.scene_shards >= 2
    key = await api.key()
    other_agent = await api.key()
    written: list[dict[str, Any]] = []
    for i in range(23):  # projects spread over the shards
        types = ("Fact", "Decision", "Risk")
        written.append(await write(api, key, f"note {i} about topic {i % 5}", cell_type=types[i % 3], project_id=f"p{i % 6}"))
    written.append(await write(api, other_agent, "a note by someone else", project_id="p1"))
    ids = sorted(n["id"] for n in written)
    for limit in (1, 5, 24, 500):
        listed = await pages(api, key, limit)
        assert [i for page in listed for i in page] == ids, limit
        assert all(0 < len(page) <= limit for page in listed)
    by_project = [i for p in await pages(api, key, 4, project_id="p1") for i in p]
    assert by_project == sorted(n["id"] for n in written if n["node_type"]["Cell"]["project_id"] == "p1")
    risky = [i for p in await pages(api, key, 3, cell_type=["Risk", "Decision"]) for i in p]
    assert risky == sorted(n["id"] for n in written if n["cell_type"] in ("Risk", "Decision"))
    agent_of = written[-1]["source_agent"]
    mine = [i for p in await pages(api, key, 50, source_agent=agent_of) for i in p]
    assert mine == [written[-1]["id"]]
    scene = written[0]["scene_id"]
    in_scene = [i for p in await pages(api, key, 50, scene_id=scene) for i in p]
    assert in_scene == sorted(n["id"] for n in written if n["scene_id"] == scene)
    layer = written[1]["layer"]
    in_layer = [i for p in await pages(api, key, 50, layer=layer) for i in p]
    assert in_layer == sorted(n["id"] for n in written if n["layer"] == layer)


async def test_a_page_is_stable_while_cells_are_written_and_deleted(api: Api) -> None:
    key = await api.key()
    first = [await write(api, key, f"steady note {i}") for i in range(6)]
    r = (await api.send("GET", "/v1/cells", key, params={"limit": 3})).json()
    assert [n["id"] for n in r["cells"]] == [n["id"] for n in first[:3]]
    await api.send("DELETE", f"/v1/cells/{first[1]['id']}", key)  # behind the cursor
    await api.send("DELETE", f"/v1/cells/{first[4]['id']}", key)  # ahead of it
    late = await write(api, key, "a note written while paging")
    rest = (await api.send("GET", "/v1/cells", key, params={"limit": 10, "cursor": r["next_cursor"]})).json()
    assert [n["id"] for n in rest["cells"]] == [first[3]["id"], first[5]["id"], late["id"]]


async def test_superseded_cells_are_listed_only_when_asked(api: Api) -> None:
    key = await api.key()
    dupes = [await write(api, key, "the on-call rotation changes every monday") for _ in range(3)]
    scene = dupes[0]["scene_id"]
    report = (await api.send("POST", f"/v1/scenes/{scene}/consolidate", key)).json()
    assert sorted(report["cells_superseded"]) == sorted(n["id"] for n in dupes)
    (pattern,) = report["patterns_created"]
    live = (await api.send("GET", "/v1/cells", key)).json()["cells"]
    assert [n["id"] for n in live] == [pattern["id"]]
    everything = (await api.send("GET", "/v1/cells", key, params={"include_superseded": "true"})).json()["cells"]
    assert sorted(n["id"] for n in everything) == sorted([pattern["id"], *(n["id"] for n in dupes)])
    one = (await api.send("GET", f"/v1/cells/{dupes[0]['id']}", key)).json()
    assert one["superseded_by"] == pattern["id"]


async def test_bad_ids_cursors_and_limits_get_the_envelope(api: Api) -> None:
    key = await api.key()
    assert_error(await api.send("GET", "/v1/cells/not-a-uuid", key), 400, "validation")
    assert_error(await api.send("DELETE", "/v1/cells/not-a-uuid", key), 400, "validation")
    assert_error(await api.send("GET", "/v1/cells", key, params={"cursor": "%%%"}), 400, "validation")
    assert_error(await api.send("GET", "/v1/cells", key, params={"limit": 501}), 400, "validation")
    assert_error(await api.send("GET", "/v1/cells", key, params={"limit": 0}), 400, "validation")
    assert_error(await api.send("GET", "/v1/cells", key, params={"cell_type": "Gossip"}), 400, "validation")
    assert_error(await api.send("GET", "/v1/cells", key, params={"layer": "L9"}), 400, "validation")
    assert_error(await api.send("GET", "/v1/cells", None), 401, "unauthorized")
    assert_error(await api.send("DELETE", "/v1/cells/01a2040c-0000-7000-8000-000000000000", None), 401, "unauthorized")
