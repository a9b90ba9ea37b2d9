"""Retrieval quality: hybrid (BM25 fused with dense) against dense only, on the labelled set of ``bench.convmem``.

One real ``memesh serve`` (the real model unless ``--engine hash``); each
conversation is its own tenant and project, written through
``POST /v1/cells:batch`` as ``"<speaker>: <text>"`` cells. Every question is
asked through ``POST /v1/query`` and ``POST /v1/recall`` (k 10), once with
``"ranking": "dense"`` and once with ``"ranking": "hybrid"``, and beside them
in this process by exact cosine search with the same engine over the same
contents (the reference dense ranking).

Figures per method: evidence recall@10 (the share of a question's answering
turns in its top 10, averaged), hit@10 (any answering turn in the top 10),
MRR@10; and recall@10 per question kind.

With ``--locomo PATH`` the same is measured on LoCoMo, a public benchmark we may not ship
(:mod:`bench.locomo`): its release zip or folder, brought by whoever runs it.

Run: ``.venv/bin/python -m bench.hybrid_quality [--engine minilm-onnx|minilm|hash] [--conversations 12] [--locomo PATH]``.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from bench import locomo
from bench.common import MemeshServer, Report, banner, machine_info, percentile, print_table
from bench.convmem import Dataset, Question, build

K = 10
SECTION = "hybrid quality"


def scores(ranked: list[str], evidence: tuple[str, ...]) -> tuple[float, float, float]:
    """(recall@K, hit@K, reciprocal rank@K) of ``ranked`` turn ids against ``evidence``."""
    top = ranked[:K]
    found = [turn for turn in evidence if turn in top]
    first = min((top.index(t) + 1 for t in found), default=0)
    return len(found) / len(evidence), float(bool(found)), (1.0 / first if first else 0.0)


def exact_dense(engine_name: str, data: Dataset) -> dict[str, list[str]]:
    """Each question's top K turn ids by exact cosine, in this process, with the server's engine."""
    from head.embedding import make_engine

    engine = make_engine(engine_name)
    ranked: dict[str, list[str]] = {}
    for conv in data.conversations:
        texts = [f"{t.speaker}: {t.text}" for t in conv.turns]
        matrix = engine.encode(texts)
        asked = [q for q in data.questions if q.conversation_id == conv.id]
        queries = engine.encode([q.text for q in asked])
        sims = queries @ matrix.T
        for q, row in zip(asked, sims, strict=True):
            order = np.argsort(-row, kind="stable")[:K]
            ranked[q.id] = [conv.turns[i].id for i in order]
    return ranked


def main(argv: list[str] | None = None, report: Report | None = None) -> Report:
    parser = argparse.ArgumentParser(prog="python -m bench.hybrid_quality", description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", default="minilm-onnx", choices=["minilm", "minilm-onnx", "minilm-bf16", "hash"])
    parser.add_argument("--conversations", type=int, default=12)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--locomo", type=Path, help="LoCoMo's locomo10.zip or its folder of conversations (not shipped)")
    args = parser.parse_args(argv)
    report = report or Report()
    data = locomo.load(args.locomo) if args.locomo else build(args.seed, args.conversations)
    turns = sum(len(c.turns) for c in data.conversations)
    banner(f"hybrid against dense retrieval ({args.engine}; {turns} turns, {len(data.questions)} questions, k {K})")
    print(machine_info())
    rankings: dict[str, dict[str, list[str]]] = {"exact dense (in process)": exact_dense(args.engine, data)}
    latency: dict[str, list[float]] = defaultdict(list)
    with MemeshServer(args.engine) as server:
        keys: dict[str, str] = {}
        turn_of: dict[str, str] = {}
        started = time.perf_counter()
        for conv in data.conversations:
            keys[conv.id] = key = server.issue_key(tenant=f"convmem-{conv.id}", name=conv.id)
            with server.client(key) as http:
                for start in range(0, len(conv.turns), 64):
                    chunk = conv.turns[start : start + 64]
                    cells = [{"content": f"{t.speaker}: {t.text}", "cell_type": "Fact", "project_id": conv.id} for t in chunk]
                    reply = http.post("/v1/cells:batch", json={"cells": cells})
                    reply.raise_for_status()
                    turn_of.update((node["id"], t.id) for node, t in zip(reply.json(), chunk, strict=True))
        print(f"wrote {turns} turns in {time.perf_counter() - started:.1f} s", flush=True)
        server.settle(600.0)
        for path in ("query", "recall"):
            for ranking in ("dense", "hybrid"):
                method = f"REST {path}, {ranking}"
                rankings[method] = {}
                for q in data.questions:
                    with server.client(keys[q.conversation_id]) as http:
                        t0 = time.perf_counter()
                        reply = http.post(f"/v1/{path}", json={"text": q.text, "k": K, "ranking": ranking})
                        latency[method].append(time.perf_counter() - t0)
                    reply.raise_for_status()
                    rankings[method][q.id] = [turn_of[node["id"]] for node in reply.json()]
    totals = print_scores(data.questions, rankings, latency)
    for path in ("query", "recall"):
        dense = totals[f"REST {path}, dense"]
        for figure, at in ((f"evidence recall@{K}", 0), (f"MRR@{K}", 2)):
            name = f"REST {path}, hybrid: {figure}"
            report.add(SECTION, name, totals[f"REST {path}, hybrid"][at], "", f"dense {figure}", dense[at])
    return report


def print_scores(
    questions: list[Question], rankings: dict[str, dict[str, list[str]]], latency: dict[str, list[float]]
) -> dict[str, tuple[float, float, float]]:
    """Print the table of figures per method; return each method's (recall@K, hit@K, MRR@K)."""
    kinds = sorted({q.kind for q in questions})
    rows, totals = [], {}
    for method, ranked in rankings.items():
        per = [scores(ranked[q.id], q.evidence) for q in questions]
        recall, hit, mrr = (float(np.mean([p[i] for p in per])) for i in range(3))
        totals[method] = (recall, hit, mrr)
        by_kind = [float(np.mean([scores(ranked[q.id], q.evidence)[0] for q in questions if q.kind == kind])) for kind in kinds]
        p50 = f"{percentile(latency[method], 50) * 1000:.1f}" if latency.get(method) else ""
        rows.append([method, f"{recall:.3f}", f"{hit:.3f}", f"{mrr:.3f}", *(f"{v:.3f}" for v in by_kind), p50])
    print_table(["method", f"recall@{K}", f"hit@{K}", f"MRR@{K}", *(f"recall@{K} {k}" for k in kinds), "p50 ms"], rows)
    for path in ("query", "recall"):
        dense, hybrid = totals[f"REST {path}, dense"][0], totals[f"REST {path}, hybrid"][0]
        print(f"{path}: hybrid / dense recall@{K} = {hybrid / dense:.3f}" if dense else f"{path}: dense found nothing")
    exact = totals["exact dense (in process)"][0]
    print(f"REST query dense / exact dense = {totals['REST query, dense'][0] / exact:.3f}" if exact else "")
    return totals


if __name__ == "__main__":
    main()
