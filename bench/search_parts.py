"""A scene shard's part of a read, in process, each figure against a dense exact search of the same rows.

One :class:`~mesh.partition.MemoryPartition` holds ``--cells`` cells of one
tenant in ``--projects`` projects (generated sentences, ``hash`` vectors of
384 dimensions; what BM25 costs depends on the texts' postings, not on the
model). Per query, best of ``--rounds`` passes over ``--queries`` queries:

- the baseline: the shard's dense answer (``answer`` without terms: an exact
  search of every row, its 40 nearest);
- BM25 alone (``LexicalIndex.scores``), with the statistics kept from the
  query before and with them computed afresh (what a query after a write pays);
- the hybrid answer (dense and BM25 lists of 40, what ``recall`` asks);
- a hybrid answer pickled and loaded, as it crosses the actor hop to the head.

Run: ``.venv/bin/python -m bench.search_parts [--cells 10000] [--projects 1]``.
"""

from __future__ import annotations

import argparse
import pickle
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TypeVar

from bench.common import Report, SentenceGen, banner
from head.embedding import HashEngine
from mesh.lexical import query_terms
from mesh.model import Cell, CellType, Layer
from mesh.partition import MemoryPartition
from mesh.query import NodeFilter, SearchRequest
from mesh.tuning import SceneTuning

SECTION = "search parts"
TENANT = "bench"
T = TypeVar("T")
POOL = 40  # what a recall of k 10 asks each shard for (recall.candidates_factor 4)


def per_call_ms(items: Sequence[T], call: Callable[[T], object], rounds: int) -> float:
    """The best of ``rounds`` passes over ``items``, per item, in ms (the least disturbed pass)."""
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for item in items:
            call(item)
        best = min(best, time.perf_counter() - started)
    return best / len(items) * 1000


def build(cells: int, projects: int, gen: SentenceGen) -> MemoryPartition:
    """One tenant's ``cells`` cells over ``projects`` projects, written in batches of 256."""
    engine = HashEngine(384)
    texts = gen.many(cells)
    vectors = engine.encode(texts)
    at = datetime.now(UTC)
    partition = MemoryPartition(384, SceneTuning())
    rows = [
        Cell(
            str(uuid.uuid4()),
            TENANT,
            f"p{i % projects}",
            CellType.FACT,
            text,
            0.5,
            "agent",
            at,
            at,
            Layer.L0,
            vectors[i],
            engine.name,
        )
        for i, text in enumerate(texts)
    ]
    for start in range(0, cells, 256):
        chunk = rows[start : start + 256]
        partition.write(chunk, [str(uuid.uuid4()) for _ in chunk])
    return partition


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--projects", type=int, default=1)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    banner(f"a scene shard's part of a read ({args.cells} cells, {args.projects} projects, {args.queries} queries)")
    gen = SentenceGen(2024)
    partition = build(args.cells, args.projects, gen)
    questions = gen.many(args.queries)
    vectors = HashEngine(384).encode(questions)
    dense = [SearchRequest(TENANT, vectors[i], POOL, NodeFilter()) for i in range(len(questions))]
    hybrid = [SearchRequest(TENANT, vectors[i], POOL, NodeFilter(), tuple(query_terms(q))) for i, q in enumerate(questions)]
    terms = [list(q.terms or ()) for q in hybrid]
    lexical = partition._tenants[TENANT].lexical  # the index a hybrid search scores with
    live = partition._tenants[TENANT].index.live()

    def fresh(query: list[str]) -> object:
        lexical._generation += 1  # what a write between two queries does to the kept statistics
        return lexical.scores(query, live, live)

    report = Report()
    rounds = args.rounds
    baseline = per_call_ms(dense, partition.answer, rounds)
    report.add(SECTION, "dense answer (exact search, 40 nearest)", baseline, "ms")
    kept = per_call_ms(terms, lambda query: lexical.scores(query, live, live), rounds)
    report.add(SECTION, "BM25 scores, statistics kept", kept, "ms", "dense answer", baseline)
    report.add(SECTION, "BM25 scores, statistics computed", per_call_ms(terms, fresh, rounds), "ms", "dense answer", baseline)
    both = per_call_ms(hybrid, partition.answer, rounds)
    report.add(SECTION, "hybrid answer (dense and BM25, 40 each)", both, "ms", "dense answer", baseline)
    answers = [[partition.answer(r)] for r in hybrid]
    dumped = [pickle.dumps(a, protocol=5) for a in answers]
    dump = per_call_ms(answers, lambda a: pickle.dumps(a, protocol=5), rounds)
    report.add(SECTION, "hybrid answer pickled", dump, "ms", "dense answer", baseline)
    report.add(SECTION, "hybrid answer loaded", per_call_ms(dumped, pickle.loads, rounds), "ms", "dense answer", baseline)
    report.print_table()


if __name__ == "__main__":
    main()
