"""The worked example of docs/propagation.md, computed by the real walk code.

Run from the repository root:

    .venv/bin/python docs/_scripts/walk_example.py

It drives ``mesh.walk.WalkState`` (the pure decision core every SceneShard
uses) with hand-made neighbour lists instead of a real mesh, under the default
``propagation`` settings, and prints every hop event, every reach (future
inbox delivery) and the delivery ids. It then replays the same walk with the
owners' answers arriving in other orders and checks that nothing changes.

Vectors play no part in the decisions (similarity and relevance are given
directly), so every scene carries a dummy vector: a scene needs one only so
that the next wave can search around it.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from actors.propagation import diff_id_of
from cluster.settings import PropagationSettings
from mesh.walk import Candidate, NodeKind, WalkState, merge_candidates

DUMMY = np.zeros(4, dtype=np.float32)
CELL_ID = "01960000-0000-7000-8000-000000000001"  # the written cell (any id; the diff id derives from it)


def scene(node_id: str, similarity: float, relevance: float) -> Candidate:
    return Candidate(node_id, NodeKind.SCENE, similarity, relevance, None, DUMMY)


def beacon(node_id: str, agent: str, similarity: float, relevance: float, standing: float) -> Candidate:
    return Candidate(node_id, NodeKind.BEACON, similarity, relevance, agent, None, standing)


def agent(agent_id: str, similarity: float, relevance: float, standing: float) -> Candidate:
    # An agent node's node id is its agent id.
    return Candidate(agent_id, NodeKind.AGENT, similarity, relevance, agent_id, None, standing)


# What the node owners answer for each frontier node: its nearest nodes among the
# tenant's scenes (SceneShards) and agent nodes and beacons (BeaconSets), with the
# cosine to the frontier node (similarity) and to the diff (relevance), and for a
# leaf its standing: (relevance - the node's mean) / its sd, from its statistics.
SCENE_SHARDS = {
    "S0": [scene("S0", 1.00, 0.80), scene("S1", 0.80, 0.60), scene("S2", 0.60, 0.40)],
    "S1": [scene("S1", 1.00, 0.60), scene("S0", 0.80, 0.80), scene("S3", 0.50, 0.55)],
    "S2": [scene("S2", 1.00, 0.40), scene("S0", 0.60, 0.80)],
    "S3": [scene("S3", 1.00, 0.55), scene("S4", 0.70, 0.90)],
    "S4": [scene("S4", 1.00, 0.90)],
}
BEACON_SETS = {
    "S0": [beacon("B1", "alice", 0.90, 0.80, 3.1), agent("bob", 0.70, 0.20, 0.4), agent("gina", 0.60, 0.45, 0.8)],
    "S1": [beacon("B1", "alice", 0.75, 0.80, 3.1), agent("carol", 0.70, 0.70, 1.2), beacon("B4", "frank", 0.65, 0.42, 2.3)],
    "S2": [agent("carol", 0.80, 0.70, 1.2)],
    "S3": [beacon("B2", "dave", 0.60, 0.50, 2.4)],
    "S4": [beacon("B3", "erin", 0.80, 0.85, 3.0)],
}


def owner_answers(frontier: list[str]) -> list[dict[str, list[Candidate]]]:
    """One answer per owner, as ``Propagator.walk_many`` gathers them for a wave."""
    return [
        {f: list(SCENE_SHARDS.get(f, [])) for f in frontier},
        {f: list(BEACON_SETS.get(f, [])) for f in frontier},
    ]


def walk(shuffle: random.Random | None = None) -> WalkState:
    policy = PropagationSettings().policy()  # the defaults of the propagation settings
    state = WalkState.start(policy, "S0", DUMMY, salience=0.5)
    while not state.done:
        parts = owner_answers([f.node_id for f in state.frontier])
        if shuffle is not None:  # answers and candidates arriving in another order
            shuffle.shuffle(parts)
            for part in parts:
                for candidates in part.values():
                    shuffle.shuffle(candidates)
        state.advance(merge_candidates(parts, policy.fan_out, policy.leaf_fan_out))
    return state


def chain_depth(salience: float, relevance: float) -> int:
    """How many hops a diff travels down a chain of scenes that all have ``relevance`` to it."""
    policy = PropagationSettings().policy()
    state = WalkState.start(policy, "C0", DUMMY, salience)
    while not state.done:
        (node,) = state.frontier
        nxt = f"C{int(node.node_id[1:]) + 1}"
        state.advance({node.node_id: [scene(nxt, 0.9, relevance)]})
    return max((e.hop_index for e in state.events if e.outcome.value == "delivered"), default=0)


def main() -> None:
    policy = PropagationSettings().policy()
    print(
        f"policy: base_energy={policy.base_energy} salience_energy={policy.salience_energy} "
        f"min_cost={policy.min_cost} max_cost={policy.max_cost} floor={policy.floor} "
        f"gate={policy.gate} fan_out={policy.fan_out} max_hops={policy.max_hops}\n"
        f"        leaf_fan_out={policy.leaf_fan_out} standout={policy.standout} close_match={policy.close_match}"
    )
    print(f"E0 = {policy.base_energy} + {policy.salience_energy} * 0.5 = {policy.initial_energy(0.5):.4f}")
    print()
    state = walk()
    relevance = {c.node_id: c.relevance for part in (SCENE_SHARDS, BEACON_SETS) for cs in part.values() for c in cs}
    print("hop  from -> to     outcome    relevance standing  criterion    cost     energy before -> after")
    for e in state.events:
        rel = relevance[e.to_node] if e.from_node is not None else None
        cost = f"{policy.cost(rel):.4f}" if rel is not None else "-"
        rel_s = f"{rel:.2f}" if rel is not None else "-"
        standing = f"{e.standing:.1f}" if e.standing is not None else "-"
        criterion = e.criterion.value if e.criterion is not None else "-"
        print(
            f"{e.hop_index:>3}  {e.from_node or '(seed)':>4} -> {e.to_node:<6} {e.outcome.value:<10} "
            f"{rel_s:>9} {standing:>8}  {criterion:<11} {cost:>6}   {e.energy_before:.4f} -> {e.energy_after:.4f}"
        )
    print()
    diff_id = diff_id_of(CELL_ID)
    print(f"diff id = uuid5(namespace, cell id) = {diff_id}")
    print("reaches (one inbox delivery each):")
    for r in state.reaches:
        print(
            f"  agent={r.agent_id:<6} node={r.node_id:<6} kind={r.kind.value:<7} "
            f"score={r.score:.2f} hops={r.hops} energy={r.energy:.4f} criterion={r.criterion.value}"
            f"  delivery id={diff_id}:{r.node_id}"
        )
    print(f"waves run: {state.hop}; frontier left: {[f.node_id for f in state.frontier]}")
    print()
    reference = (state.events, state.reaches)
    for seed in range(200):
        other = walk(random.Random(seed))
        assert (other.events, other.reaches) == reference, f"order {seed} changed the walk"
    print("200 other arrival orders of the owners' answers: identical events and reaches")
    print()
    print("hops travelled down a chain of equally relevant scenes (max_hops caps at 16):")
    relevances = (1.0, 0.9, 0.8, 0.6, 0.4, 0.3)
    print("salience  E0    " + "  ".join(f"rel {r:.1f}" for r in relevances))
    for salience in (0.0, 0.25, 0.5, 0.75, 1.0):
        depths = "  ".join(f"{chain_depth(salience, r):>7}" for r in relevances)
        print(f"{salience:>8}  {policy.initial_energy(salience):.2f}  {depths}")


if __name__ == "__main__":
    main()
