"""What decides a push: a leaf's standing (``mesh.standing``), the match rule (``EnergyPolicy.passes``)
and the per-node budget of an inbox (``AgentInbox.enqueue_within``), each against plain arithmetic."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mesh.inbox import AgentInbox, Budget
from mesh.inbox_wire import with_withheld
from mesh.standing import MIN_SD, LeafStandings, StandingPrior
from mesh.walk import Candidate, Criterion, EnergyPolicy, NodeKind, Outcome, WalkState


# ------------------------------------------------------------------ standing
def test_a_new_node_is_judged_by_the_prior_alone() -> None:
    stats = LeafStandings(StandingPrior(mean=0.1, sd=0.1, weight=20))
    stats.reset(0)
    z = stats.standing(np.array([0]), np.array([0.35]))
    assert abs(z[0] - 2.5) < 1e-9


@given(st.lists(st.floats(-1, 1), min_size=1, max_size=60), st.floats(0, 50))
def test_moments_are_the_weighted_mean_and_sd_of_prior_and_writes(seen: list[float], weight: float) -> None:
    prior = StandingPrior(mean=0.1, sd=0.2, weight=weight, half_life=float("inf"))
    stats = LeafStandings(prior)
    stats.reset(0)
    for start in range(0, len(seen), 7):  # folded in batches, as walks do
        stats.fold(np.array([seen[start : start + 7]]))
    mean, sd = stats.moments(np.array([0]))
    n = len(seen) + weight
    expected_mean = (sum(seen) + weight * prior.mean) / n
    second = (sum(x * x for x in seen) + weight * (prior.sd**2 + prior.mean**2)) / n
    assert abs(mean[0] - expected_mean) < 1e-9
    assert abs(sd[0] - max(np.sqrt(max(second - expected_mean**2, 0.0)), MIN_SD)) < 1e-6


def test_old_writes_fade_with_the_half_life() -> None:
    stats = LeafStandings(StandingPrior(weight=0, half_life=10))
    stats.reset(0)
    stats.fold(np.full((1, 10), 0.9))
    stats.fold(np.full((1, 10), 0.1))
    mean, _ = stats.moments(np.array([0]))
    assert abs(mean[0] - (0.9 * 0.5 + 0.1 * 1.0) / 1.5) < 1e-9  # the first ten weigh half


def test_a_node_that_sees_the_same_relevance_again_and_again_needs_a_real_margin() -> None:
    stats = LeafStandings(StandingPrior(weight=0))
    stats.reset(0)
    stats.fold(np.full((1, 100), 0.5))
    assert abs(stats.standing(np.array([0]), np.array([0.5]))[0]) < 1e-9
    assert abs(stats.standing(np.array([0]), np.array([0.5 + 2 * MIN_SD]))[0] - 2.0) < 1e-9


# ---------------------------------------------------------------- match rule
def leaf(relevance: float, standing: float | None) -> Candidate:
    return Candidate("b1", NodeKind.BEACON, 0.5, relevance, "alice", None, standing)


def test_the_match_rule() -> None:
    p = EnergyPolicy(gate=0.3, standout=1.5, close_match=0.6)
    assert p.passes(leaf(0.2, 1.6)) is Criterion.STANDOUT  # low for a fixed gate, high for this node
    assert p.passes(leaf(0.4, 1.4)) is None  # above the scene gate, but usual for this node
    assert p.passes(leaf(0.65, -1.0)) is Criterion.CLOSE_MATCH  # a close match whatever the node usually sees
    assert p.passes(leaf(-0.1, 9.0)) is None  # never a negative relevance
    assert p.passes(leaf(0.15, 9.0)) is None  # noise standing out from noise: under ``standout_floor``
    assert p.passes(Candidate("s1", NodeKind.SCENE, 0.5, 0.31)) is Criterion.GATE
    assert p.passes(Candidate("s1", NodeKind.SCENE, 0.5, 0.29)) is None


def test_events_and_reaches_say_which_rule_passed() -> None:
    p = EnergyPolicy()
    state = WalkState.start(p, "s0", np.ones(4, dtype=np.float32) / 2, salience=1.0)
    state.advance({"s0": [leaf(0.25, 2.0), Candidate("b2", NodeKind.BEACON, 0.4, 0.7, "bob", None, 0.0)]})
    by_node = {e.to_node: e for e in state.events[1:]}
    assert by_node["b1"].criterion is Criterion.STANDOUT and by_node["b1"].standing == 2.0
    assert by_node["b2"].criterion is Criterion.CLOSE_MATCH and by_node["b2"].outcome is Outcome.DELIVERED
    assert {(r.node_id, r.criterion) for r in state.reaches} == {("b1", Criterion.STANDOUT), ("b2", Criterion.CLOSE_MATCH)}


def test_leaves_have_their_own_quota_beside_scenes() -> None:
    p = EnergyPolicy(fan_out=1, leaf_fan_out=2, gate=0.0, close_match=0.0)
    state = WalkState.start(p, "s0", np.ones(4, dtype=np.float32) / 2, salience=1.0)
    cands = [Candidate(f"s{i}", NodeKind.SCENE, 0.9 - i / 100, 0.9, None, np.ones(4, dtype=np.float32) / 2) for i in range(1, 4)]
    cands += [Candidate(f"b{i}", NodeKind.BEACON, 0.5 - i / 100, 0.9, "x") for i in range(1, 5)]
    state.advance({"s0": cands})
    assert [e.to_node for e in state.events[1:]] == ["s1", "b1", "b2"]


# -------------------------------------------------------------------- budget
def fill(inbox: AgentInbox, budget: Budget, node: str, scores: list[float], at: float = 10.0) -> list[str]:
    """Deliver one delivery per score to ``node``, committing each; the ids kept at the end."""
    for n, score in enumerate(scores):
        inbox.enqueue_within(budget, f"d{n}:{node}", f"d{n}", "p", score, '"diff":{},"delivery":{}', at)
        inbox.commit(inbox.last_seq)
    return [d.delivery_id for d in inbox.deliveries if d.node_id == node]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(0, 1, allow_nan=False), min_size=0, max_size=30), st.integers(1, 6))
def test_the_budget_keeps_the_best_of_what_the_agent_has_not_seen(scores: list[float], limit: int) -> None:
    inbox, budget = AgentInbox(), Budget(limit, 60.0)
    kept = fill(inbox, budget, "b1", scores)
    assert len(kept) == min(limit, len(scores))
    best = sorted(range(len(scores)), key=lambda n: (-scores[n], n))[:limit]  # ties: the earlier stays
    assert sorted(kept) == sorted(f"d{n}:b1" for n in best)
    if len(scores) > limit:
        assert all(inbox.withheld(d, budget) == len(scores) - limit for d in inbox.deliveries)


def test_what_a_pull_served_is_never_taken_back_and_the_budget_still_holds() -> None:
    inbox, budget = AgentInbox(), Budget(2, 60.0)
    fill(inbox, budget, "b1", [0.1, 0.2])
    page = inbox.pull(None, None, None, 10, lambda _: True)  # served, not acknowledged
    assert [d.delivery_id for d in page.items] == ["d1:b1", "d0:b1"]
    stored, displaced = inbox.enqueue_within(budget, "d9:b1", "d9", "p", 0.99, '"diff":{},"delivery":{}', 10.0)
    assert stored is None and displaced is None  # the window is full of what the agent has seen
    assert inbox.withheld(inbox.deliveries[0], budget) == 1


def test_each_node_and_each_window_has_its_own_budget() -> None:
    inbox, budget = AgentInbox(), Budget(1, 60.0)
    fill(inbox, budget, "b1", [0.5])
    fill(inbox, budget, "b2", [0.4])
    inbox.enqueue_within(budget, "late:b1", "late", "p", 0.1, '"diff":{},"delivery":{}', 70.0)  # the next window
    assert sorted(d.delivery_id for d in inbox.deliveries) == ["d0:b1", "d0:b2", "late:b1"]


def test_a_replayed_loser_stays_out_and_a_displaced_one_cannot_return() -> None:
    inbox, budget = AgentInbox(), Budget(1, 60.0)
    fill(inbox, budget, "b1", [0.3, 0.6])  # d1 displaces d0
    assert [d.delivery_id for d in inbox.deliveries] == ["d1:b1"]
    for delivery_id, score in [("d0:b1", 0.3), ("d0:b1", 0.9)]:
        assert inbox.enqueue_within(budget, delivery_id, "d0", "p", score, "m", 10.0) == (None, None)


def test_budget_state_of_old_windows_leaves_memory() -> None:
    inbox, budget = AgentInbox(), Budget(1, 1.0)
    rng = random.Random(3)
    for second in range(500):
        inbox.enqueue_within(budget, f"x{second}:b{rng.randrange(50)}", f"x{second}", "p", 0.5, "m", float(second))
    assert {window for _, window, _ in inbox._kept} <= {498, 499}


def test_close_matches_are_counted_apart_from_standouts() -> None:
    """A flood of inferred matches never crowds out a direct hit; direct hits have their own bound."""
    inbox, budget = AgentInbox(), Budget(limit=2, window_s=60.0, close_limit=3)
    for n in range(5):  # five standouts, served at once: the budget of 2 is spent
        inbox.enqueue_within(budget, f"s{n}:b1", f"s{n}", "p", 0.3, "m", 10.0)
        inbox.commit(inbox.last_seq)
        inbox.pull(None, None, None, 10, lambda _: True)
    for n in range(5):  # then five close matches, unserved: their own count of 3, the best kept
        inbox.enqueue_within(budget, f"c{n}:b1", f"c{n}", "p", 0.7 + n / 100, "m", 10.0, close=True)
        inbox.commit(inbox.last_seq)
    ids = [d.delivery_id for d in inbox.deliveries]
    assert ids == ["s0:b1", "s1:b1", "c2:b1", "c3:b1", "c4:b1"]
    assert inbox.withheld(inbox.deliveries[0], budget) == 3 + 2  # both counts in the marker


def test_the_marker_goes_inside_the_delivery_object() -> None:
    members = '"diff":{"id":"d"},"delivery":{"score":0.5}'
    assert with_withheld(members, 0) == members
    assert with_withheld(members, 4) == '"diff":{"id":"d"},"delivery":{"score":0.5,"withheld":4}'
