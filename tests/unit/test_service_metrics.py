"""/metrics: requests by surface, route and status, latency, embedding batches, deliveries, inbox lag, storage commits,
actor restarts; and the Grafana dashboard in cluster/grafana, every query of which names a metric /metrics exposes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import promql_parser
from prometheus_client.parser import text_string_to_metric_families

from head.facade import Memesh
from tests.unit.conftest import Api
from tests.unit.test_propagation import settle

DASHBOARD = Path(__file__).resolve().parents[2] / "cluster" / "grafana" / "memesh-dashboard.json"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, by name and sorted labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


async def scrape(api: Api) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = await api.http.get("/metrics")
    assert r.status_code == 200
    return samples(r.text)


async def traffic(api: Api) -> tuple[str, str]:
    """Writes, reads, refusals and a delivery waiting for its ack; the (writer, reader) keys."""
    writer, reader = await api.key(), await api.key(roles=("Reader",))
    beacon = await api.send("POST", "/v1/beacons", reader, {"interest": "kubernetes helm deployment"})
    assert beacon.status_code == 200, beacon.text
    for i in range(3):
        r = await api.send("POST", "/v1/cells", writer, {"content": f"kubernetes helm deployment step {i}", "cell_type": "Fact"})
        assert r.status_code == 201
    assert (await api.send("GET", "/v1/cells/01a2040c-0000-7000-8000-000000000000", writer)).status_code == 404
    assert (await api.send("POST", "/v1/query", None, {"text": "x", "k": 1})).status_code == 401  # refused by the gate
    assert (await api.send("GET", "/v1/no-such-route", writer)).status_code == 404
    await settle(api.memesh)
    return writer, reader


async def test_requests_are_counted_by_route_template_and_status_with_latency(make_core: Any) -> None:
    core: Memesh = make_core(server={"health_cache_s": 0})
    api = Api(core)
    try:
        await traffic(api)
        found = await scrape(api)
        assert value(found, "memesh_requests_total", surface="rest", route="/v1/cells", status="201") == 3
        assert value(found, "memesh_requests_total", surface="rest", route="/v1/cells/{cell_id}", status="404") == 1
        assert value(found, "memesh_requests_total", surface="rest", route="/v1/query", status="401") == 1
        assert value(found, "memesh_requests_total", surface="rest", route="unmatched", status="404") == 1
        assert value(found, "memesh_request_duration_seconds_count", surface="rest", route="/v1/cells") == 3
        assert value(found, "memesh_request_duration_seconds_bucket", surface="rest", route="/v1/cells", le="+Inf") == 3
        assert value(found, "memesh_request_duration_seconds_sum", surface="rest", route="/v1/cells") > 0
        assert not any("no-such-route" in str(labels) or "01a2040c" in str(labels) for _, labels in found)  # bounded labels
    finally:
        await api.http.aclose()
        await core.close()


async def test_embedding_deliveries_inbox_lag_commits_and_restarts(make_core: Any) -> None:
    core: Memesh = make_core(server={"health_cache_s": 0})
    api = Api(core)
    try:
        _, reader = await traffic(api)
        found = await scrape(api)
        assert value(found, "memesh_embedding_batch_texts_count") >= 2  # the beacon's interest and the cells
        assert value(found, "memesh_embedding_batch_texts_sum") >= 4
        delivered = value(found, "memesh_deliveries_total")
        assert delivered >= 1
        assert value(found, "memesh_inbox_unacked") == delivered == value(found, "memesh_inbox_unacked_max")
        assert value(found, "memesh_storage_commit_seconds_count") >= 3
        assert value(found, "memesh_storage_commit_seconds_bucket", le="+Inf") == value(
            found, "memesh_storage_commit_seconds_count"
        )
        assert value(found, "memesh_walk_scene_searches_total", answer="run") >= 3  # each walk's first wave at least
        assert ("memesh_walk_scene_searches_total", (("answer", "kept"),)) in found
        for kind in ("scene_shard", "beacon_set", "inbox_shard", "registry"):
            assert ("memesh_actor_restarts_total", (("kind", kind),)) in found
            assert value(found, "memesh_actor_restarts_total", kind=kind) == 0
        page = (await api.send("POST", "/v1/inbox:pull", reader, {})).json()
        acked = await api.send("POST", "/v1/inbox:pull", reader, {"ack": page["window_high"]})
        assert acked.json()["cursor"] == page["window_high"]
        after = await scrape(api)
        assert value(after, "memesh_inbox_unacked") == 0 and value(after, "memesh_deliveries_total") == delivered
    finally:
        await api.http.aclose()
        await core.close()


def dashboard_metrics() -> dict[str, set[str]]:
    """Each panel's title and the metric names its queries select (parsed as PromQL, not pattern-matched)."""
    board = json.loads(DASHBOARD.read_text())
    used: dict[str, set[str]] = {}
    for panel in board["panels"]:
        names: set[str] = set()
        for target in panel["targets"]:

            def visit(node: Any, names: set[str] = names) -> bool:
                if isinstance(node, promql_parser.VectorSelector) and node.name:
                    names.add(node.name)
                return True

            promql_parser.walk(promql_parser.parse(target["expr"]), visit)
        used[panel["title"]] = names
    return used


async def test_every_dashboard_panel_queries_metrics_that_exist(api: Api) -> None:
    await traffic(api)
    exposed = {name for name, _ in await scrape(api)}
    used = dashboard_metrics()
    assert len(used) >= 10 and all(used.values()), used
    for title, names in used.items():
        assert names <= exposed, f"panel {title!r} queries {sorted(names - exposed)}, not on /metrics"
    covered = set().union(*used.values())
    for needed in (  # issue 15: what an operator must see
        "memesh_requests_total",
        "memesh_request_duration_seconds_bucket",
        "memesh_embedding_queue_texts",
        "memesh_embedding_batch_texts_count",
        "memesh_walks_total",
        "memesh_deliveries_total",
        "memesh_inbox_unacked",
        "memesh_storage_commit_seconds_bucket",
        "memesh_actor_restarts_total",
    ):
        assert needed in covered, needed


def test_a_misspelled_metric_in_a_panel_is_caught(tmp_path: Path) -> None:
    """The check above would fail on a typo: parse a query with one and find the name it selects."""
    names: set[str] = set()
    promql_parser.walk(
        promql_parser.parse("sum(rate(memesh_request_total[5m]))"),
        lambda n: names.add(n.name) if isinstance(n, promql_parser.VectorSelector) else None,
    )
    assert names == {"memesh_request_total"}
