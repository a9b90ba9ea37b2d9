"""``actors.heap``: a full collection scans only what was made since the last one, and garbage cycles among
frozen objects are still freed once a reclaim period.

Each check runs in a fresh interpreter: the policy changes the collector of the whole process it runs in.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(probe: str) -> str:
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_what_a_started_process_holds_and_what_survives_a_full_collection_is_frozen() -> None:
    out = run(
        """
import gc
from actors.heap import keep_pauses_short
keep_pauses_short()
started = gc.get_freeze_count()
keep_pauses_short()  # a second call changes nothing
again = gc.get_freeze_count()
kept = [[n] for n in range(50_000)]  # made after the start: tracked, unfrozen
gc.collect(2)
print(started > 0, again == started, gc.get_freeze_count() >= started + 50_000, len(gc.get_objects(2)) < 1_000)
"""
    )
    assert out == "True True True True"


def test_a_full_collection_after_the_reclaim_period_frees_cycles_among_frozen_objects() -> None:
    out = run(
        """
import gc, weakref
import actors.heap as heap
heap.keep_pauses_short()

class Node:
    pass

a, b = Node(), Node()
a.other, b.other = b, a  # a cycle
gone = weakref.ref(a)
gc.collect(2)  # survivors frozen: the cycle is out of the collector's sight
del a, b
gc.collect(2)
frozen_cycle_kept = gone() is not None
heap.RECLAIM_EVERY_S = 0.0  # the period is over: the next full collection hands the frozen objects back
gc.collect(2)
heap.RECLAIM_EVERY_S = 600.0
gc.collect(2)  # and this one scans them, then freezes its survivors again
print(frozen_cycle_kept, gone() is None, gc.get_freeze_count() > 0)
"""
    )
    assert out == "True True True"
