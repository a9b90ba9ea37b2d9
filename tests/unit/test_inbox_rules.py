"""The inbox cursor rules, checked against a reference model of the spec.

The reference below is written from the spec's text (sections 3 and 4) with
plain loops, independently of ``mesh.inbox``; hypothesis drives both with the
same random sequences of deliveries, commits, pulls, acks, ``since`` and
``limit`` and requires identical answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mesh.inbox import AgentInbox

MAX_BATCH = 5
PROJECTS = ["p1", "p2", "p3"]


@dataclass
class Reference:
    deliveries: list[tuple[int, str, float]] = field(default_factory=list)  # (seq, project, score)
    durable: int = 0  # how many deliveries are commit-stable
    watermark: int = 0
    handed: int = 0  # the highest window_high answered so far

    def deliver(self, project: str, score: float) -> None:
        self.deliveries.append((len(self.deliveries) + 1, project, score))

    def commit_all(self) -> None:
        self.durable = len(self.deliveries)

    def pull(self, since: int | None, ack: int | None, limit: int | None, scope: set[str]) -> tuple[list[int], int, int, bool]:
        stable = [d for d in self.deliveries if d[0] <= self.durable]
        newest = stable[-1][0] if stable else 0
        # "ack above the stored watermark advances it, clamped to the newest sequence this call examined";
        # "window_high is the highest delivery_seq the next call may acknowledge" (rule 6)
        if ack is not None and ack > self.watermark:
            self.watermark = max(self.watermark, min(ack, newest, self.handed))
        # "since overrides the stored cursor for this page (strictly greater than)"
        floor = self.watermark if since is None else since
        page_size = MAX_BATCH if limit in (None, 0) else min(limit, MAX_BATCH)
        window = [d for d in stable if d[0] > floor][:page_size]
        high = window[-1][0] if window else min(floor, newest)
        visible = [d for d in window if not scope or d[1] in scope]
        visible.sort(key=lambda d: (-d[2], d[0]))  # display order: highest score first
        more = any(d[0] > high for d in stable)
        self.handed = max(self.handed, high)
        return [d[0] for d in visible], self.watermark, high, more


seqs = st.integers(min_value=0, max_value=40)
operation = st.one_of(
    st.tuples(st.just("deliver"), st.sampled_from(PROJECTS), st.sampled_from([0.1, 0.5, 0.5, 0.9])),
    st.tuples(st.just("commit")),
    st.tuples(
        st.just("pull"),
        st.none() | seqs,  # since
        st.none() | seqs,  # ack
        st.none() | st.integers(min_value=0, max_value=8),  # limit
        st.sampled_from([frozenset(), frozenset({"p1"}), frozenset({"p2", "p3"})]),
    ),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, max_size=60))
def test_inbox_matches_the_reference_model(ops: list[tuple[object, ...]]) -> None:
    inbox, ref = AgentInbox(), Reference()
    for n, op in enumerate(ops):
        if op[0] == "deliver":
            _, project, score = op
            stored = inbox.enqueue(f"d{n}", f"diff{n}", str(project), float(score), "{}")  # type: ignore[arg-type]
            assert stored is not None and stored.seq == len(ref.deliveries) + 1
            ref.deliver(str(project), float(score))  # type: ignore[arg-type]
        elif op[0] == "commit":
            inbox.commit(inbox.last_seq)
            ref.commit_all()
        else:
            _, since, ack, limit, scope = op
            cursor_before = inbox.cursor
            page = inbox.pull(since, ack, limit, MAX_BATCH, lambda p, s=scope: not s or p in s)  # type: ignore[misc, operator]
            expected = ref.pull(since, ack, limit, set(scope))  # type: ignore[arg-type, call-overload]
            assert ([d.seq for d in page.items], page.cursor, page.window_high, page.has_more) == expected
            assert page.cursor >= cursor_before  # never rewinds
            assert all(d.seq <= inbox.committed for d in page.items)  # only commit-stable deliveries
            if ack is None:
                assert page.cursor == cursor_before


def test_redelivery_until_acknowledged_and_partial_acks() -> None:
    inbox = AgentInbox()
    for i, score in enumerate([0.2, 0.9, 0.5]):
        inbox.enqueue(f"d{i}", f"x{i}", "p", score, "{}")
    assert inbox.pull(None, None, None, 10, lambda _: True).items == []  # nothing committed yet
    inbox.commit(3)
    first = inbox.pull(None, None, None, 10, lambda _: True)
    assert [d.seq for d in first.items] == [2, 3, 1]  # score order
    assert (first.cursor, first.window_high, first.has_more) == (0, 3, False)
    again = inbox.pull(None, 1, None, 10, lambda _: True)  # handled seq 1 only
    assert [d.seq for d in again.items] == [2, 3] and again.cursor == 1
    clamped = inbox.pull(None, 99, None, 10, lambda _: True)
    assert clamped.cursor == 3 and clamped.items == []
    assert inbox.pull(None, 2, None, 10, lambda _: True).cursor == 3  # no rewind
    replay = inbox.pull(0, None, None, 10, lambda _: True)
    assert [d.seq for d in replay.items] == [2, 3, 1] and replay.cursor == 3
    inbox.enqueue("d3", "x3", "p", 0.4, "{}")
    inbox.commit(4)  # committed, never shown: an ack cannot reach it (rule 6)
    unseen = inbox.pull(None, 99, 1, 10, lambda _: True)
    assert unseen.cursor == 3 and [d.seq for d in unseen.items] == [4] and unseen.window_high == 4
    assert inbox.pull(None, 99, None, 10, lambda _: True).cursor == 4  # shown by the call before


def test_narrow_scope_can_give_an_empty_page_with_more_to_come() -> None:
    inbox = AgentInbox()
    for i in range(6):
        inbox.enqueue(f"d{i}", f"x{i}", "other" if i < 4 else "mine", 0.5, "{}")
    inbox.commit(6)
    page = inbox.pull(None, None, 2, 10, lambda p: p == "mine")
    assert page.items == [] and page.window_high == 2 and page.has_more
    last = inbox.pull(4, None, 2, 10, lambda p: p == "mine")
    assert [d.seq for d in last.items] == [5, 6] and not last.has_more


def test_duplicate_delivery_ids_are_not_enqueued_twice() -> None:
    inbox = AgentInbox()
    assert inbox.enqueue("same", "x", "p", 0.5, "{}") is not None
    assert inbox.enqueue("same", "x", "p", 0.5, "{}") is None
    assert inbox.last_seq == 1
