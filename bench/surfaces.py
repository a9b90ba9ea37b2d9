"""Recall latency through MCP (both protocol eras) and gRPC beside REST, against one server, in one run.

One ``memesh serve`` with the real model (``minilm``; ``--engine hash`` for a
quick look); 1,000 cells written through ``/v1/cells:batch``. Then the same
recall questions, one client at a time, interleaved round by round so that a
slow moment of the machine falls on every surface alike:

- REST: ``POST /v1/recall`` on a keep-alive ``httpx`` connection (the baseline);
- MCP, handshake era: the official ``mcp`` client (``mode="legacy"``), one
  ``tools/call recall`` per question over one connection;
- MCP, 2026-07-28 era: the same client in the sessionless era;
- gRPC: ``memesh.data.v1.DataService/Recall`` (BASIC view: node ids and
  distances) through the generated stub on one ``grpc.aio`` channel.

Each MCP and gRPC figure is printed as a ratio to the REST p50 of the same run.

Run: ``.venv/bin/python -m bench.surfaces [--engine hash] [--questions 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import time

import grpc
import httpx2
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from bench.common import MemeshServer, Report, SentenceGen, banner, percentile
from memesh_proto import data_pb2, data_pb2_grpc

GRPC = "gRPC"


async def measure(server: MemeshServer, key: str, questions: list[str]) -> dict[str, list[float]]:
    rest = server.async_client(key, connections=1)
    times: dict[str, list[float]] = {"REST /v1/recall": [], "MCP legacy": [], "MCP 2026-07-28": [], GRPC: []}
    eras = {"MCP legacy": "legacy", "MCP 2026-07-28": "2026-07-28"}
    clients: dict[str, Client] = {}
    async with contextlib.AsyncExitStack() as stack:  # clients leave in the reverse order they came
        for name, era in eras.items():
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60, trust_env=False)
            transport = streamable_http_client(f"{server.base_url}/mcp", http_client=http)
            clients[name] = await stack.enter_async_context(Client(transport, mode=era))
        stack.push_async_callback(rest.aclose)
        channel = await stack.enter_async_context(grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_data_port}"))
        data = data_pb2_grpc.DataServiceStub(channel)
        metadata = (("x-service-key", key),)
        for text in questions:
            order = list(times)
            random.shuffle(order)
            for name in order:
                start = time.perf_counter()
                if name in clients:
                    result = await clients[name].call_tool("recall", {"text": text, "k": 10})
                    assert not result.is_error, result.content
                elif name == GRPC:
                    answer = await data.Recall(data_pb2.RetrieveRequest(text=text, k=10), metadata=metadata, timeout=60)
                    assert answer.hits
                else:
                    response = await rest.post("/v1/recall", json={"text": text, "k": 10})
                    response.raise_for_status()
                times[name].append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--engine", default="minilm")
    parser.add_argument("--cells", type=int, default=1000)
    parser.add_argument("--questions", type=int, default=200)
    args = parser.parse_args()
    random.seed(7)
    gen = SentenceGen(7)
    banner(f"recall through MCP and gRPC beside REST ({args.engine}, {args.cells} cells, {args.questions} questions)")
    report = Report()
    with MemeshServer(args.engine) as server:
        key = server.issue_key()
        with server.client(key) as http:
            for start in range(0, args.cells, 64):
                cells = [{"content": gen.sentence(), "cell_type": "Fact"} for _ in range(min(64, args.cells - start))]
                http.post("/v1/cells:batch", json={"cells": cells}).raise_for_status()
        server.settle(120.0)
        warmup = [gen.sentence() for _ in range(10)]
        asyncio.run(measure(server, key, warmup))
        times = asyncio.run(measure(server, key, [gen.sentence() for _ in range(args.questions)]))
    base, base99 = (percentile(times["REST /v1/recall"], p) * 1000 for p in (50, 99))
    report.add("surfaces", "REST /v1/recall p50", base, "ms")
    for name in ("MCP legacy", "MCP 2026-07-28", GRPC):
        values = times[name]
        report.add("surfaces", f"{name} recall p50", percentile(values, 50) * 1000, "ms", "REST p50", base)
        report.add(
            "surfaces",
            f"{name} recall p99",
            percentile(values, 99) * 1000,
            "ms",
            "REST p99",
            base99,
        )
    report.print_table()


if __name__ == "__main__":
    main()
