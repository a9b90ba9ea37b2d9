"""Cells an agent manages by id, against a running ``memesh serve`` (real model, Ray, LanceDB), through REST,
gRPC and MCP: the writer, a teammate, another tenant, and a deleted cell gone from query and recall."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import grpc
import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from prometheus_client.parser import text_string_to_metric_families

from memesh_proto import data_pb2 as pb
from memesh_proto import data_pb2_grpc
from tests.servers import Server, assert_envelope

DEPLOY = "We deploy the billing service with blue-green releases behind the load balancer."
OTHER = "The office coffee machine is descaled on the first Friday of each month."


def auth(key: str) -> tuple[tuple[str, str], ...]:
    return (("x-service-key", key),)


def requests_counted(exposition: str) -> dict[tuple[str, str, str], float]:
    """``memesh_requests_total`` of a /metrics page, by (surface, route, status)."""
    counted: dict[tuple[str, str, str], float] = collections.defaultdict(float)
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == "memesh_requests_total":
                counted[(sample.labels["surface"], sample.labels["route"], sample.labels["status"])] += sample.value
    return counted


def ids(nodes: list[dict[str, Any]]) -> list[str]:
    return [n["id"] for n in nodes]


def test_writer_teammate_and_stranger_through_rest_and_grpc(server: Server) -> None:
    writer = server.issue("cells-e2e", "Writer", "writer")["plaintext_secret"]
    teammate = server.issue("cells-e2e", "Writer", "teammate")["plaintext_secret"]
    stranger = server.issue("cells-e2e-other", "ProjectAdmin", "stranger")["plaintext_secret"]
    with server.http(writer) as w, server.http(teammate) as t, server.http(stranger) as s:
        deploy = w.post("/v1/cells", json={"content": DEPLOY, "cell_type": "Decision"}).json()
        other = w.post("/v1/cells", json={"content": OTHER, "cell_type": "Fact"}).json()
        assert t.get(f"/v1/cells/{deploy['id']}").json() == deploy
        assert ids(t.get("/v1/cells").json()["cells"]) == sorted([deploy["id"], other["id"]])
        assert_envelope(s.get(f"/v1/cells/{deploy['id']}"), 404, "not_found")
        assert_envelope(s.delete(f"/v1/cells/{deploy['id']}"), 404, "not_found")
        assert s.get("/v1/cells").json() == {"cells": [], "next_cursor": None}
        assert_envelope(t.delete(f"/v1/cells/{deploy['id']}"), 403, "forbidden")

        question = {"text": "how is the billing service released", "k": 5}
        assert ids(w.post("/v1/query", json=question).json())[0] == deploy["id"]
        with grpc.insecure_channel(server.grpc_data_address) as channel:
            stub = data_pb2_grpc.DataServiceStub(channel)
            node = stub.GetCell(pb.CellRef(cell_id=deploy["id"]), metadata=auth(teammate), timeout=30)
            assert (node.content, node.cell.project_id, list(node.embedding)) == (DEPLOY, "default", [])
            page = stub.ListCells(pb.ListCellsRequest(page_size=1, cell_types=["Decision"]), metadata=auth(writer), timeout=30)
            assert [c.id for c in page.cells] == [deploy["id"]] and page.next_page_token == ""
            with pytest.raises(grpc.RpcError) as refused:
                stub.DeleteCell(pb.CellRef(cell_id=deploy["id"]), metadata=auth(teammate), timeout=30)
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            stub.DeleteCell(pb.CellRef(cell_id=deploy["id"]), metadata=auth(writer), timeout=30)
            with pytest.raises(grpc.RpcError) as gone:
                stub.GetCell(pb.CellRef(cell_id=deploy["id"]), metadata=auth(writer), timeout=30)
            assert gone.value.code() == grpc.StatusCode.NOT_FOUND
            hits = stub.Query(pb.RetrieveRequest(text=question["text"], k=5), metadata=auth(teammate), timeout=30).hits
            assert [h.node_id for h in hits] == [other["id"]]

        for path in ("/v1/query", "/v1/recall"):  # gone at once, for everyone, in both rankings
            for key_client in (w, t):
                for ranking in ("hybrid", "dense"):
                    assert ids(key_client.post(path, json={**question, "ranking": ranking}).json()) == [other["id"]]
        assert_envelope(w.get(f"/v1/cells/{deploy['id']}"), 404, "not_found")
        assert ids(w.get("/v1/cells").json()["cells"]) == [other["id"]]
        counted = requests_counted(w.get("/metrics").text)  # each surface's calls, by route and outcome
        assert counted[("grpc", "GetCell", "OK")] >= 1 and counted[("grpc", "GetCell", "NOT_FOUND")] >= 1
        assert counted[("grpc", "DeleteCell", "PERMISSION_DENIED")] >= 1 and counted[("grpc", "DeleteCell", "OK")] >= 1
        assert counted[("rest", "/v1/cells/{cell_id}", "403")] >= 1 and counted[("rest", "/v1/cells/{cell_id}", "404")] >= 3


def test_an_agent_reads_and_deletes_its_cells_through_mcp(server: Server) -> None:
    key = server.issue("cells-mcp", "Writer", "mcp-writer")["plaintext_secret"]

    async def body() -> None:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
        async with Client(streamable_http_client(f"{server.base_url}/mcp", http_client=http), mode="legacy") as mcp:
            written = (await mcp.call_tool("write_cell", {"content": DEPLOY, "cell_type": "Decision"})).structured_content
            (hit,) = (await mcp.call_tool("recall", {"text": "billing releases", "k": 1})).structured_content["result"]
            cell = (await mcp.call_tool("get_cell", {"node_id": hit["node_id"]})).structured_content
            assert cell["id"] == written["node_id"] and cell["content"] == DEPLOY and "embedding" not in cell
            page = (await mcp.call_tool("list_cells", {"limit": 10})).structured_content
            assert [c["id"] for c in page["cells"]] == [written["node_id"]] and page["next_cursor"] is None
            assert (await mcp.call_tool("delete_cell", {"node_id": written["node_id"]})).structured_content == {"ok": True}
            again = await mcp.call_tool("get_cell", {"node_id": written["node_id"]})
            assert again.is_error and again.content[0].text.startswith("not_found:")
            assert (await mcp.call_tool("recall", {"text": "billing releases", "k": 1})).structured_content["result"] == []
        with server.http() as anyone:
            assert requests_counted(anyone.get("/metrics").text)[("mcp", "/mcp", "200")] >= 6

    asyncio.run(asyncio.wait_for(body(), 120))
