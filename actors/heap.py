"""Short garbage-collection pauses for processes that hold a large, long-lived heap and answer calls.

CPython's full (generation 2) collection walks every tracked object of the
process while holding the GIL: the actor's event loop, and so every call
waiting on it, stalls for the whole walk. A scene shard holding 10,000 cells
(and the imports of LanceDB, pydantic and Ray, 140,000 objects before any
data) paused 130 to 150 ms for each one, six times in five seconds while a
backlog of walks drained, since the walks' short-lived objects reach the old
generation while their waves travel (docs/benchmarks.md, "Event-loop stalls").

:func:`keep_pauses_short` makes each full collection scan only what was made
since the last one:

- what the process holds once it has started is collected once, then frozen
  (``gc.freeze``): never scanned again, still freed as usual when its last
  reference goes;
- after every full collection the survivors are frozen too, so the next one
  scans only the objects that reached the old generation since (and CPython
  runs it only once those number a quarter of the survivors before);
- every ``RECLAIM_EVERY_S`` the frozen objects are handed back (``gc.unfreeze``),
  so the next full collection scans everything once and frees garbage cycles
  among them: one long pause a period instead of several a second.

Guarantees: idempotent per process; nothing that is garbage stays garbage
longer than one reclaim period plus one full collection; changes no program
behaviour beyond when cyclic garbage is freed.
"""

from __future__ import annotations

import gc
import time
from typing import Any

RECLAIM_EVERY_S = 600.0

_installed = False
_last_reclaim = 0.0


def _after_collection(phase: str, info: dict[str, Any]) -> None:
    """gc callback: at the end of a full collection freeze its survivors, or once a period hand them back."""
    global _last_reclaim
    if phase != "stop" or info.get("generation") != 2:
        return
    now = time.monotonic()
    if now - _last_reclaim >= RECLAIM_EVERY_S:
        _last_reclaim = now
        gc.unfreeze()  # the next full collection scans the whole heap once and frees cycles among old objects
    else:
        gc.freeze()


def keep_pauses_short() -> None:
    """Install the policy of this module in the calling process (once; later calls do nothing)."""
    global _installed, _last_reclaim
    if _installed:
        return
    _installed = True
    _last_reclaim = time.monotonic()
    gc.collect()
    gc.freeze()
    gc.callbacks.append(_after_collection)
