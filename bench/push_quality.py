"""Push quality: the energy walk measured as a recommender, on the labelled set of ``bench.convmem``.

The set, as agents would live it (``push_set``): the twelve conversations of
``bench.convmem`` in three tenants of four, each conversation its own project.
Each conversation has three agents: its two speakers, who write their own
turns, and a listener, who places every question about the conversation as a
beacon *before* anything is written, plus two interests nothing in the set
satisfies (``UNSATISFIABLE``). The turns are then written over time, session by
session across the conversations of a tenant (``cells:batch``, one batch per
speaker and session), by the speakers' own keys. A beacon is *satisfied* by
the turns that answer its question (its evidence); walks cross projects within
a tenant, so every other conversation of the tenant is a distractor.

Per beacon, after the walks have drained and every listener has pulled its
whole inbox (acknowledging each page): the satisfying writes delivered to it,
its deliveries, and the same for two exact-matching references computed in
this process with the same engine at the same volume:

- *exact, global*: the V (beacon, write) pairs of highest cosine within each
  tenant, V = memesh's total beacon deliveries (one fixed cosine gate, in
  hindsight);
- *exact, per beacon*: each beacon's n highest-cosine writes, n = what memesh
  delivered to it (memesh's own allocation, ranked in hindsight).

Also printed: the volume distribution (beacons with nothing, with and without
a satisfying write; the most flooded), deliveries over the budget, precision
(satisfying / delivered), the ``withheld`` markers, and write-to-inbox latency
(``delivery.delivered_at`` minus ``diff.provenance.created_at``, the time from
the write's commit to its walk's deliveries; the stream's own figure is
``bench.propagation --only latency``).

Run: ``.venv/bin/python -m bench.push_quality [--engine minilm|hash] [--seed 7] [--env KEY=VALUE ...]``.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from bench.common import MemeshServer, banner, machine_info, percentile, print_table
from bench.convmem import build
from bench.propagation import issue_many

CONVERSATIONS_PER_TENANT = 4
UNSATISFIABLE = [
    "Did anyone mention the deadline for the quarterly tax filing?",
    "What went wrong with the dishwasher repair?",
]


@dataclass(frozen=True)
class Interest:
    id: str
    tenant: str
    conversation: str
    text: str
    kind: str
    satisfied_by: tuple[str, ...]  # turn ids


@dataclass
class Write:
    tenant: str
    conversation: str
    speaker: str
    session: int
    turns: list[tuple[str, str]] = field(default_factory=list)  # (turn id, content)


@dataclass
class PushSet:
    tenants: list[str]
    interests: list[Interest]
    writes: list[Write]  # in the order they are made
    contents: dict[str, str]  # turn id -> content
    tenant_of_turn: dict[str, str]


def push_set(seed: int = 7, conversations: int = 12) -> PushSet:
    """The set for ``seed`` (deterministic)."""
    data = build(seed, conversations)
    tenant_of = {c.id: f"push-{n // CONVERSATIONS_PER_TENANT}" for n, c in enumerate(data.conversations)}
    interests = [
        Interest(q.id, tenant_of[q.conversation_id], q.conversation_id, q.text, q.kind, q.evidence) for q in data.questions
    ]
    for conv in data.conversations:
        interests += [
            Interest(f"{conv.id}-none{i}", tenant_of[conv.id], conv.id, text, "unsatisfiable", ())
            for i, text in enumerate(UNSATISFIABLE)
        ]
    writes: list[Write] = []
    sessions = max(t.session for c in data.conversations for t in c.turns)
    for session in range(1, sessions + 1):
        for conv in data.conversations:
            for speaker in conv.speakers:
                turns = [(t.id, f"{t.speaker}: {t.text}") for t in conv.turns if t.session == session and t.speaker == speaker]
                if turns:
                    writes.append(Write(tenant_of[conv.id], conv.id, speaker, session, turns))
    contents = {t.id: f"{t.speaker}: {t.text}" for c in data.conversations for t in c.turns}
    turn_tenant = {t.id: tenant_of[c.id] for c in data.conversations for t in c.turns}
    return PushSet(sorted(set(tenant_of.values())), interests, writes, contents, turn_tenant)


@dataclass
class Delivered:
    turn: str
    score: float
    hops: int
    latency_s: float
    withheld: int
    criterion: str = ""
    window: int = 0  # the budget window (delivered_at // budget_window_s) it was counted in


def run_server(ps: PushSet, engine: str, env: dict[str, str]) -> tuple[dict[str, list[Delivered]], float, float]:
    """Place the beacons, write the turns, drain the walks, pull every listener's inbox.
    Returns (deliveries per interest id, seconds writing, seconds until the walks drained)."""
    delivered: dict[str, list[Delivered]] = defaultdict(list)
    with MemeshServer(engine, env={"MEMESH_RATE_LIMITS__INBOX__RATE": "0", **env}) as server:
        conversations = sorted({i.conversation for i in ps.interests})
        keys: dict[tuple[str, str], str] = {}
        for tenant in ps.tenants:
            convs = [c for c in conversations if any(i.conversation == c and i.tenant == tenant for i in ps.interests)]
            listeners = issue_many(server, len(convs), tenant, "Reader")
            keys.update(((c, "listener"), k) for c, k in zip(convs, listeners, strict=True))
            speakers = sorted({(w.conversation, w.speaker) for w in ps.writes if w.tenant == tenant})
            writers = issue_many(server, len(speakers), tenant, "Writer")
            keys.update(zip(speakers, writers, strict=True))
        beacon_of: dict[str, str] = {}
        for interest in ps.interests:
            with server.client(keys[(interest.conversation, "listener")]) as http:
                reply = http.post("/v1/beacons", json={"interest": interest.text})
                reply.raise_for_status()
                beacon_of[reply.json()["node_id"]] = interest.id
        turn_of: dict[str, str] = {}
        started = time.perf_counter()
        for write in ps.writes:
            with server.client(keys[(write.conversation, write.speaker)]) as http:
                cells = [{"content": text, "cell_type": "Fact", "project_id": write.conversation} for _, text in write.turns]
                reply = http.post("/v1/cells:batch", json={"cells": cells})
                reply.raise_for_status()
                turn_of.update((node["id"], tid) for node, (tid, _) in zip(reply.json(), write.turns, strict=True))
        wrote = time.perf_counter() - started
        settle_s, _ = server.settle(900.0)
        for conv in conversations:
            with server.client(keys[(conv, "listener")]) as http:
                body: dict[str, int] = {}
                for _ in range(10_000):
                    page = http.post("/v1/inbox:pull", json=body).json()
                    for item in page["items"]:
                        d = item["delivery"]
                        if d["node_kind"] != "beacon" or d["node_id"] not in beacon_of:
                            continue
                        created = datetime.fromisoformat(item["diff"]["provenance"]["created_at"])
                        at = datetime.fromisoformat(d["delivered_at"])
                        turn = turn_of.get(item["diff"]["cell_id"], "?")
                        delivered[beacon_of[d["node_id"]]].append(
                            Delivered(
                                turn,
                                d["score"],
                                d["hops"],
                                (at - created).total_seconds(),
                                d.get("withheld", 0),
                                d.get("criterion", ""),
                                int(at.timestamp() // float(env.get("MEMESH_PROPAGATION__BUDGET_WINDOW_S", "3600"))),
                            )
                        )
                    body = {"ack": page["window_high"]}
                    if not page["has_more"]:
                        break
    return delivered, wrote, wrote + settle_s


def exact_references(ps: PushSet, engine_name: str, volume: dict[str, int]) -> tuple[int, int, float]:
    """(satisfying pairs of the global reference, of the per-beacon reference, the global cosine gate) at memesh's volume."""
    from head.embedding import make_engine

    engine = make_engine(engine_name)
    pairs: list[tuple[float, bool]] = []
    per_beacon = 0
    for tenant in ps.tenants:
        turn_ids = [t for t, owner in ps.tenant_of_turn.items() if owner == tenant]
        matrix = engine.encode([ps.contents[t] for t in turn_ids])
        interests = [i for i in ps.interests if i.tenant == tenant]
        sims = engine.encode([i.text for i in interests]) @ matrix.T
        for interest, row in zip(interests, sims, strict=True):
            satisfied = set(interest.satisfied_by)
            flags = [t in satisfied for t in turn_ids]
            pairs += zip(row.tolist(), flags, strict=True)
            n = volume.get(interest.id, 0)
            if n:
                top = np.argsort(-row, kind="stable")[:n]
                per_beacon += sum(flags[j] for j in top)
    total = sum(volume.values())
    pairs.sort(key=lambda p: -p[0])
    chosen = pairs[:total]
    return sum(flag for _, flag in chosen), per_beacon, (chosen[-1][0] if chosen else 1.0)


def report(ps: PushSet, delivered: dict[str, list[Delivered]], engine: str, wrote: float, drained: float) -> None:
    per = {i.id: delivered.get(i.id, []) for i in ps.interests}
    volume = {i: len({d.turn for d in ds}) for i, ds in per.items()}
    satisfied = {i.id: set(i.satisfied_by) for i in ps.interests}
    hits = {i: len({d.turn for d in ds} & satisfied[i]) for i, ds in per.items()}
    total, found = sum(volume.values()), sum(hits.values())
    wanted = sum(len(s) for s in satisfied.values())
    exact_global, exact_per, gate = exact_references(ps, engine, volume)
    satisfiable = [i for i in ps.interests if i.satisfied_by]
    empty_satisfiable = sum(1 for i in satisfiable if volume[i.id] == 0)
    empty_unsat = sum(1 for i in ps.interests if not i.satisfied_by and volume[i.id] == 0)
    counts = sorted(volume.values())
    banner("push quality")
    unsatisfiable = len(ps.interests) - len(satisfiable)
    print(f"{len(ps.interests)} beacons ({len(satisfiable)} satisfiable), {len(ps.contents)} writes")
    print(f"wrote in {wrote:.1f} s, walks drained at {drained:.1f} s")

    def row(method: str, hit: int, note: str) -> list[str]:
        return [method, str(total), str(hit), f"{hit / max(total, 1):.3f}", f"{hit / max(wanted, 1):.3f}", note]

    rows = [
        row("memesh", found, ""),
        row("exact, global gate", exact_global, f"cosine >= {gate:.3f}"),
        row("exact, per beacon", exact_per, "memesh's volume per beacon"),
    ]
    print_table(["method", "deliveries", "satisfying delivered", "precision", f"recall (of {wanted})", "note"], rows)
    print(f"satisfying delivered, memesh / exact global = {found / max(exact_global, 1):.3f}")
    print(f"satisfying delivered, memesh / exact per beacon = {found / max(exact_per, 1):.3f}")
    print(f"beacons with nothing: {empty_satisfiable} of {len(satisfiable)} satisfiable,", end=" ")
    print(f"{empty_unsat} of {unsatisfiable} unsatisfiable")
    print(f"deliveries per beacon: median {counts[len(counts) // 2]}, mean {total / len(counts):.1f}, top five {counts[-5:]}")
    unsat = [volume[i.id] for i in ps.interests if not i.satisfied_by]
    print(f"deliveries to unsatisfiable beacons: total {sum(unsat)}, max {max(unsat, default=0)}")
    for criterion in ("standout", "close_match"):
        counted = Counter((beacon, d.window) for beacon, ds in per.items() for d in ds if d.criterion == criterion)
        print(f"most {criterion} deliveries to one beacon in one budget window: {max(counted.values(), default=0)}")
    marked = [max((d.withheld for d in ds), default=0) for ds in per.values()]
    print(f"beacons with a withheld marker: {sum(1 for m in marked if m)}; most for one beacon: {max(marked, default=0)}")
    kinds = sorted({i.kind for i in satisfiable})
    rows = []
    for kind in kinds:
        members = [i for i in satisfiable if i.kind == kind]
        d = sum(volume[i.id] for i in members)
        h = sum(hits[i.id] for i in members)
        empty = sum(1 for i in members if volume[i.id] == 0)
        rows.append([kind, str(len(members)), str(d), str(h), f"{h / max(d, 1):.3f}", str(empty)])
    print_table(["kind", "beacons", "deliveries", "satisfying", "precision", "with nothing"], rows)
    hops = Counter(d.hops for ds in per.values() for d in ds)
    print("deliveries by hop:", dict(sorted(hops.items())))
    latencies = [d.latency_s for ds in per.values() for d in ds]
    if latencies:
        p50, p99 = 1000 * percentile(latencies, 50), 1000 * percentile(latencies, 99)
        print(f"write commit to walk delivery: p50 {p50:.0f} ms, p99 {p99:.0f} ms (under the burst of the whole set;")
        print("  the quiet figure is bench.propagation --only latency)")


ONE_RUN_WINDOW_S = 7 * 24 * 3600


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--engine", default="minilm", choices=["minilm", "minilm-onnx", "minilm-bf16", "hash"])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--conversations", type=int, default=12)
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the server (settings to compare)")
    args = parser.parse_args()
    ps = push_set(args.seed, args.conversations)
    env = dict(item.split("=", 1) for item in args.env)
    # The set's writes stand for a long history compressed into minutes: the whole run is one budget window,
    # wherever it falls against the wall-clock hour (an hour boundary inside the run would double the budget).
    env.setdefault("MEMESH_PROPAGATION__BUDGET_WINDOW_S", str(ONE_RUN_WINDOW_S))
    banner(f"push quality ({args.engine}, seed {args.seed}, env {env or 'defaults'})")
    print(machine_info())
    delivered, wrote, drained = run_server(ps, args.engine, env)
    report(ps, delivered, args.engine, wrote, drained)


if __name__ == "__main__":
    main()
