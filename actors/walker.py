"""Walker: runs the walks the scene shards' writes start, in a process of its own at a lower OS priority.

A walk's own work (deciding waves, merging the owners' answers, building
deliveries and traces) used to run on the event loop of the scene shard that
wrote the cell, the loop that also answers every search: while a backlog of
walks drained, a recall waited behind them (docs/benchmarks.md, "Walks in
their own processes"). A scene shard now hands each batch of walks to walker
``index % walkers`` and waits for it; the owners (scene shards, beacon sets)
still answer the waves, the inbox shards still take the deliveries.

Guarantees:
- ``walk`` decides and delivers the batch as ``actors.propagation.Propagator``
  does, against the deployment as ``spec`` describes it (the caller's view: a
  scene shard of a resized layout sends its own), and answers once every
  delivery is committed; it holds no state a restart loses beyond the
  presence view, which it asks the owners for again.
- Stateless otherwise: Ray may restart it at any time; the scene shard's walk
  queue retries a failed batch (``actors.walk_queue``).
- ``nice`` > 0 lowers every thread of its process that many steps below the
  niceness it was started with (the other actors'; at most 19), in a Ray
  actor process only (the in-process directory never passes one), so under
  contention the kernel gives the CPU to requests first; idle cores still run
  walks at full speed. Raising niceness needs no privilege.
"""

from __future__ import annotations

import functools
import logging
import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from actors.chores import Background
from actors.propagation import PropagationConfig, Propagator
from mesh.deployment import DirectorySpec
from mesh.model import Cell, Vector
from mesh.seam import Directory

log = logging.getLogger(__name__)

LAYOUTS_KEPT = 4  # layouts a walker keeps a propagator (and presence view) for, the ones used last

Lookups = Callable[[DirectorySpec], Callable[[], Directory]]  # a spec -> how to find that layout's actors


@dataclass(frozen=True, slots=True)
class WalkerConfig:
    propagation: PropagationConfig
    index: int = 0
    nice: int = 0  # steps of niceness below the priority it was started with; 0: the same


def lower_priority(steps: int) -> int:
    """Lower every thread of this process to ``steps`` above the calling thread's niceness, at most 19 (Linux
    applies niceness per thread; threads made later inherit it from the thread that makes them); returns
    the niceness set. A thread that cannot be changed is logged and left as it is."""
    nice = min(19, os.getpriority(os.PRIO_PROCESS, 0) + steps)
    try:
        threads = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]  # no /proc: this thread only
    for thread in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, thread, nice)
        except OSError as exc:  # a thread that ended meanwhile, or a platform without per-thread priority
            log.debug("niceness of thread %d not set: %s", thread, exc)
    return nice


class Walker:
    def __init__(self, config: WalkerConfig, lookups: Lookups | None = None) -> None:
        """``lookups`` builds the directory of a layout (Ray); None: the directory ``attach`` gives (in-process)."""
        self.config = config
        self._lookups = lookups
        self._attached: Directory | None = None
        self._propagators: OrderedDict[DirectorySpec | None, Propagator] = OrderedDict()  # least recently used first
        self._pulls = Background("presence pull")
        self._retiring = Background("retired propagator")  # evicted layouts' traces drain in the background
        self.walks = 0
        self.messages = 0
        if config.nice > 0:
            lower_priority(config.nice)

    def attach(self, directory: Directory) -> None:
        """Walk with this directory (in-process), whatever spec a caller sends: it follows its layout itself."""
        self._attached = directory

    def _attached_directory(self) -> Directory:
        assert self._attached is not None
        return self._attached

    def propagator_for(self, spec: DirectorySpec) -> Propagator:
        """The propagator of ``spec``'s layout (in-process: the attached directory's, whatever the spec): kept
        for the ``LAYOUTS_KEPT`` layouts used last, so callers of two layouts (an online resize's old and new
        shards) reuse theirs; a new one gets a fresh presence view, asked of every owner in the background."""
        key = None if self._attached is not None else spec
        found = self._propagators.get(key)
        if found is not None:
            self._propagators.move_to_end(key)
            return found
        if self._attached is not None:
            directory = self._attached_directory
        elif self._lookups is not None:
            directory = functools.cache(self._lookups(spec))  # one directory a layout: its actor handles are kept
        else:
            raise RuntimeError("this walker has no directory to walk with")
        propagator = self._propagators[key] = Propagator(self.config.propagation, directory)
        if self.config.propagation.owner_addressed:
            self._pulls.spawn(propagator.pull_presence())
        while len(self._propagators) > LAYOUTS_KEPT:
            _, evicted = self._propagators.popitem(last=False)
            self._retiring.spawn(evicted.close())
        return propagator

    async def walk(self, spec: DirectorySpec, jobs: list[tuple[Cell, Vector]], now: datetime, observe: bool) -> int:
        """Decide the walks of ``jobs`` (written cells, each with the vector its first wave searches around),
        deliver what they reach and hand their traces to the observatory; ``observe`` also moves the writers'
        agent nodes (a batch's first attempt only). Returns how many walks ran."""
        propagator = self.propagator_for(spec)
        before = propagator.messages
        await propagator.propagate_many(jobs, now, observe)
        self.walks += len(jobs)
        self.messages += propagator.messages - before
        return len(jobs)

    async def note_presence(self, kind: str, index: int, tenants: list[str]) -> None:
        """Owner ``kind:index`` holds ``tenants`` (``mesh.presence``); answered at once."""
        for propagator in self._propagators.values():  # a view that learns too much only messages more
            propagator.presence.note((kind, index), tenants)

    async def health(self) -> dict[str, int]:
        return {"walks": self.walks, "walk_messages": self.messages, "pid": os.getpid()}

    async def close(self) -> None:
        await self._pulls.drain()
        for propagator in self._propagators.values():
            await propagator.close()
        await self._retiring.drain()
