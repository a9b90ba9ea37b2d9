"""Recall and query latency through REST at 10k and 100k cells, beside the floor.

For each engine (``hash``, ``minilm``) one server is started and filled in two
steps (10k, then up to 100k cells). At each size, for every query text in
turn (interleaved, so machine noise falls on all of them alike):

- the floor, in this process: one query embedding with the same engine, then
  an exact numpy search over the same vectors (``X @ q``, ``argpartition``
  top-k, sort of the k);
- ``POST /v1/query`` and ``POST /v1/recall`` (k=10), sequential, one
  keep-alive connection of the standard library's ``http.client``
  (``bench.http_clients``: ``httpx`` added about 0.8 ms of its own to each
  request until 2026-12-04; ``--client httpx`` times with it); the clock stops
  when the response body has arrived (JSON decoding on the client is not timed);
- every few queries, a LanceDB brute-force search of the same vectors plus the
  embedding (the floor as DESIGN.md section 9 words it), for reference.

Loading: cells go in through ``POST /v1/cells:batch`` (256 per request) with
caller-supplied vectors, so that 100k cells do not cost ~10 minutes of model
time. With ``hash`` the vectors are the engine's own encodings of the texts.
With ``minilm`` the first ``minilm_real`` texts get their real MiniLM vectors
(encoded here); the rest get synthetic vectors near them (a normalised blend of
two real vectors plus noise), so the 100k tier has MiniLM-like geometry
without 10 minutes of encoding. The vectors sent are rounded to 6 decimals;
the floor searches exactly those vectors, normalised as the server does.

Walks: every write starts a background energy walk. The retrieval server runs
with ``propagation.max_hops=1`` and the observatory off (see ``QUIET_WALKS``),
and each size is measured only after the server has gone idle, so the figures
are the read path alone; ``--default-walks`` keeps the default walk.

Run: ``.venv/bin/python -m bench.retrieval [--quick] [--engines hash,minilm]``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.common import (
    DIMS,
    JSON_HEADERS,
    MemeshServer,
    Report,
    SentenceGen,
    Stats,
    banner,
    cpu_line,
    loadavg,
    machine_info,
    normalize_rows,
)
from bench.http_clients import CLIENTS, Answer, StdlibClient

CORPUS_SEED = 7
QUERY_SEED = 1234
K = 10
BATCH = 256
PROJECT = "bench-retrieval"
SECTION = "retrieval"
# Every write starts an energy walk in the background (actors/propagation.py). At the
# default settings this server drains ~70-80 walks/s, so 100k bulk-loaded cells would keep
# it busy for ~20 minutes, and that work would contend with the reads being measured and
# with the floor measured in this process. Reads never walk, so the retrieval server
# runs one-wave walks without observatory traces, and every measurement waits until
# the walks have drained. bench.writes measures writes with the default walk.
QUIET_WALKS = {"MEMESH_PROPAGATION__MAX_HOPS": "1", "MEMESH_OBSERVATORY__ENABLED": "false"}


@dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...]
    queries: int
    warmup: int
    lance_every: int  # one LanceDB reference search every this many timed queries (0: none)
    minilm_real: int
    rounds: int
    settle_s: float  # longest wait for the walks started by loading to drain

    @property
    def total(self) -> int:
        return self.sizes[-1]


FULL = Plan(sizes=(10_000, 100_000), queries=200, warmup=20, lance_every=4, minilm_real=10_000, rounds=4, settle_s=300)
QUICK = Plan(sizes=(1_000, 5_000), queries=40, warmup=5, lance_every=4, minilm_real=1_000, rounds=2, settle_s=60)


# ------------------------------------------------------------------- vectors
def corpus_vectors(engine: Any, engine_name: str, texts: list[str], real: int, seed: int) -> tuple[np.ndarray, int]:
    """Rows to send (rounded to 6 decimals, float64) and how many are real encodings."""
    started = time.perf_counter()
    if engine_name == "hash":
        real = len(texts)
        raw = np.concatenate([engine.encode(texts[i : i + 4096]) for i in range(0, len(texts), 4096)])
    else:
        real = min(real, len(texts))
        parts = []
        for i in range(0, real, 1024):
            parts.append(engine.encode(texts[i : min(i + 1024, real)]))
            print(f"    encoded {min(i + 1024, real):,}/{real:,} texts with {engine.name}", end="\r", flush=True)
        print()
        base = np.concatenate(parts)
        extra = len(texts) - real
        if extra > 0:
            rng = np.random.default_rng(seed)
            a = base[rng.integers(0, real, extra)]
            b = base[rng.integers(0, real, extra)]
            noise = normalize_rows(rng.standard_normal((extra, base.shape[1])).astype(np.float32))
            synthetic = normalize_rows(0.85 * a + 0.35 * b + 0.30 * noise)
            raw = np.concatenate([base, synthetic])
        else:
            raw = base
    print(f"    {len(texts):,} vectors ready ({real:,} real encodings) in {time.perf_counter() - started:.1f} s", flush=True)
    return np.round(raw.astype(np.float64), 6), real


# ------------------------------------------------------------------- loading
def load(client: httpx.Client, gen: SentenceGen, texts: list[str], rows: np.ndarray, start: int, stop: int) -> float:
    """Write cells ``start..stop`` in batches; returns cells per second (client JSON encoding included)."""
    started = time.perf_counter()
    for offset in range(start, stop, BATCH):
        end = min(offset + BATCH, stop)
        cells = [gen.cell(texts[i], PROJECT, rows[i].tolist()) for i in range(offset, end)]
        response = client.post("/v1/cells:batch", content=json.dumps({"cells": cells}), headers=JSON_HEADERS)
        if response.status_code != 201:
            raise RuntimeError(f"cells:batch answered {response.status_code}: {response.text[:300]}")
        if (end - start) % (BATCH * 40) == 0 or end == stop:
            rate = (end - start) / (time.perf_counter() - started)
            print(f"    loaded {end:,}/{stop:,} cells ({rate:,.0f} cells/s)", end="\r", flush=True)
    print()
    return (stop - start) / (time.perf_counter() - started)


# ----------------------------------------------------------------- measuring
@dataclass
class Samples:
    floor: list[float]
    floor_embed: list[float]
    floor_search: list[float]
    query: list[float]
    recall: list[float]
    lance: list[float]
    agreement: list[float]  # |REST query top-k ∩ exact top-k| / k, by content


def exact_top(matrix: np.ndarray, vector: np.ndarray, k: int) -> np.ndarray:
    scores = matrix @ vector
    top = np.argpartition(-scores, k - 1)[:k]
    return top[np.argsort(-scores[top])]


def measure(
    client: httpx.Client | StdlibClient,
    engine: Any,
    matrix: np.ndarray,
    row_of: dict[str, int],
    queries: list[str],
    plan: Plan,
    lance_table: Any,
) -> Samples:
    """Warm-up, then ``plan.rounds`` rounds; each round times a block of floor
    searches, then the same texts through ``/v1/query``, then ``/v1/recall``
    (and a few LanceDB searches). Blocks rather than strict interleaving: the
    BLAS and OpenMP threads of this process spin for a while after a search and
    would steal the server's cores; rounds still spread any drift of the
    machine over all of them."""
    s = Samples([], [], [], [], [], [], [])
    warm, timed = queries[: plan.warmup], queries[plan.warmup :]
    for text in warm:
        engine.encode([text])
        _post(client, "/v1/query", text)
        _post(client, "/v1/recall", text)
    per_round = -(-len(timed) // plan.rounds)
    for start in range(0, len(timed), per_round):
        block = timed[start : start + per_round]
        exact: list[tuple[np.ndarray, np.ndarray]] = []
        for text in block:
            t0 = time.perf_counter()
            vector = engine.encode([text])[0]
            t1 = time.perf_counter()
            top = exact_top(matrix, vector, K)
            t2 = time.perf_counter()
            s.floor.append(t2 - t0)
            s.floor_embed.append(t1 - t0)
            s.floor_search.append(t2 - t1)
            exact.append((vector, top))
        time.sleep(0.2)
        answers = []
        for text in block:
            elapsed, answer = _post(client, "/v1/query", text)
            s.query.append(elapsed)
            answers.append(answer)
        time.sleep(0.2)
        for text in block:
            elapsed, _ = _post(client, "/v1/recall", text)
            s.recall.append(elapsed)
        time.sleep(0.2)
        if lance_table is not None and plan.lance_every:
            for text in block[:: plan.lance_every]:
                t0 = time.perf_counter()
                lance_table.search(engine.encode([text])[0]).limit(K).to_arrow()
                s.lance.append(time.perf_counter() - t0)
            time.sleep(0.2)
        # agreement of REST query with the exact search, counting ties with the k-th score as agreeing
        for (vector, top), answer in zip(exact, answers, strict=True):
            kth = float(matrix[top[-1]] @ vector)
            hits = [r for node in answer.json() if (r := row_of.get(node["content"], len(matrix))) < len(matrix)]
            s.agreement.append(sum(float(matrix[r] @ vector) >= kth - 1e-4 for r in hits) / K)
    return s


def _post(client: httpx.Client | StdlibClient, path: str, text: str) -> tuple[float, httpx.Response | Answer]:
    body = json.dumps({"text": text, "k": K})
    t0 = time.perf_counter()
    response = client.post(path, content=body, headers=JSON_HEADERS)
    elapsed = time.perf_counter() - t0
    if response.status_code != 200:
        raise RuntimeError(f"{path} answered {response.status_code}: {response.text[:300]}")
    return elapsed, response


def lance_reference(matrix: np.ndarray, directory: Path) -> Any:
    """A LanceDB table holding ``matrix`` (no index: brute force, as DESIGN.md measures it)."""
    os.environ.setdefault("LANCE_LOG", "error")
    import lancedb
    import pyarrow as pa

    db = lancedb.connect(str(directory))
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(matrix.ravel(), type=pa.float32()), matrix.shape[1])
    table = pa.table({"row": pa.array(np.arange(matrix.shape[0]), type=pa.int64()), "vector": vectors})
    return db.create_table("cells", table, mode="overwrite")


# ---------------------------------------------------------------------- run
def run_engine(engine_name: str, plan: Plan, report: Report, lance: bool, default_walks: bool, client_kind: str = "lean") -> None:
    from head.embedding import make_engine

    banner(f"retrieval, engine={engine_name}, sizes={list(plan.sizes)}, k={K}")
    print(
        f"    loading through POST /v1/cells:batch ({BATCH} per request) with caller-supplied vectors (the `embedding`"
        " field): the server embeds no corpus text; queries are embedded by the server",
        flush=True,
    )
    engine = make_engine(engine_name)
    engine.encode(["warm up the engine"])
    gen = SentenceGen(CORPUS_SEED)
    texts = gen.many(plan.total)
    queries = SentenceGen(QUERY_SEED).many(plan.warmup + plan.queries)
    rows, real = corpus_vectors(engine, engine_name, texts, plan.minilm_real, CORPUS_SEED)
    matrix = normalize_rows(rows.astype(np.float32))
    row_of: dict[str, int] = {}
    for i, text in enumerate(texts):
        row_of.setdefault(text, i)
    assert matrix.shape == (plan.total, DIMS)

    env = {} if default_walks else dict(QUIET_WALKS)
    with MemeshServer(engine_name, env=env) as server:
        print(f"    server up in {server.startup_s:.1f} s (pid {server.proc.pid if server.proc else '?'}); env {env}", flush=True)
        key = server.issue_key(name=f"bench-retrieval-{engine_name}")
        loaded = 0
        timer = server.client(key) if client_kind == "httpx" else server.lean_client(key)  # times the requests
        with server.client(key) as client, timer, tempfile.TemporaryDirectory(prefix="memesh-bench-lance-") as lance_dir:
            for size in plan.sizes:
                tag = f"{engine_name} @ {size // 1000}k"
                before = server.cpu()
                rate = load(client, gen, texts, rows, loaded, size)
                load_cpu = server.cpu().since(before)
                batches = -(-(size - loaded) // BATCH)
                added, loaded = size - loaded, size
                print(f"    {tag}: {size:,} cells acknowledged; load rate {rate:,.0f} cells/s (batches of {BATCH})")
                print(f"    load {cpu_line(load_cpu, batches)} (per batch of {BATCH})")
                drain, settled = server.settle(plan.settle_s)
                state = "drained" if settled else "STILL RUNNING (measuring anyway)"
                print(f"    walks of the {added:,} new cells: {state} {drain:.0f} s after the last write", flush=True)
                report.info[f"{tag} walk drain after load (s)"] = [round(drain, 1), settled]
                table = lance_reference(matrix[:size], Path(lance_dir) / tag.replace(" ", "")) if lance else None
                load_before = loadavg()
                before = server.cpu()
                s = measure(timer, engine, matrix[:size], row_of, queries, plan, table)
                delta = server.cpu().since(before)
                report.info[f"{tag} loadavg"] = [load_before, loadavg()]
                report.info[f"{tag} server cpu"] = cpu_line(delta, 2 * (len(s.query) + plan.warmup))
                print(f"    {cpu_line(delta, 2 * (len(s.query) + plan.warmup))} (query and recall together)")
                _report(report, tag, s, rate, real, size)


def _report(report: Report, tag: str, s: Samples, load_rate: float, real: int, size: int) -> None:
    floor, query, recall = Stats.of(s.floor), Stats.of(s.query), Stats.of(s.recall)
    embed, search = Stats.of(s.floor_embed), Stats.of(s.floor_search)
    report.add(SECTION, f"{tag} query p50", query.p50_ms, "ms", "floor p50 (embed + numpy exact)", floor.p50_ms)
    report.add(SECTION, f"{tag} query p99", query.p99_ms, "ms", "floor p99", floor.p99_ms)
    report.add(SECTION, f"{tag} recall p50", recall.p50_ms, "ms", "floor p50 (embed + numpy exact)", floor.p50_ms)
    report.add(SECTION, f"{tag} recall p99", recall.p99_ms, "ms", "floor p99", floor.p99_ms)
    if s.lance:
        lance = Stats.of(s.lance)
        report.add(
            SECTION,
            f"{tag} recall p50 vs LanceDB",
            recall.p50_ms,
            "ms",
            f"embed + LanceDB brute force p50 (n={lance.n})",
            lance.p50_ms,
        )
    agreement = float(np.mean(s.agreement)) if s.agreement else float("nan")
    print(
        f"    floor parts: embed p50 {embed.p50_ms:.2f} ms, numpy search p50 {search.p50_ms:.2f} ms; "
        f"REST query top-{K} agrees with exact top-{K}: {100 * agreement:.1f}%; n={query.n} timed queries"
    )
    report.info[f"{tag} detail"] = {
        "floor_embed_p50_ms": round(embed.p50_ms, 3),
        "floor_search_p50_ms": round(search.p50_ms, 3),
        "floor_p50_ms": round(floor.p50_ms, 3),
        "floor_p99_ms": round(floor.p99_ms, 3),
        "query_mean_ms": round(query.mean_ms, 3),
        "recall_mean_ms": round(recall.mean_ms, 3),
        "agreement_with_exact": round(agreement, 4),
        "load_cells_per_s": round(load_rate, 1),
        "real_vectors": min(real, size),
        "timed_queries": query.n,
    }


def main(argv: list[str] | None = None, report: Report | None = None) -> Report:
    parser = argparse.ArgumentParser(prog="python -m bench.retrieval", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and few queries: a smoke run")
    parser.add_argument("--engines", default="hash,minilm", help="comma-separated engines (default hash,minilm)")
    parser.add_argument("--no-lance", action="store_true", help="skip the LanceDB reference searches")
    parser.add_argument("--sizes", default="", help="comma-separated corpus sizes instead of the plan's (e.g. 10000)")
    parser.add_argument(
        "--default-walks",
        action="store_true",
        help="keep the default energy walk (~80 walks/s here: 100k loaded cells then take ~20 min to drain)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--client", default="lean", choices=CLIENTS, help="what times the requests (bench.http_clients)")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.sizes:
        plan = replace(plan, sizes=tuple(int(n) for n in args.sizes.split(",")))
    own = report is None
    report = report or Report(info={"machine": machine_info()})
    started = time.perf_counter()
    for name in [e.strip() for e in args.engines.split(",") if e.strip()]:
        run_engine(name, plan, report, lance=not args.no_lance, default_walks=args.default_walks, client_kind=args.client)
    report.info["retrieval_wall_s"] = round(time.perf_counter() - started, 1)
    if own:
        banner("retrieval figures")
        report.print_table(SECTION)
        if args.json:
            report.to_json(args.json)
    return report


if __name__ == "__main__":
    main()
