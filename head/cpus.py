"""The CPUs this process may use: what sizes the model's threads and the embedder pool by default.

Reads only the process's affinity and the cgroup v2 quota, so importing it costs nothing (settings use it).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


def cgroup_cpus(cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> int | None:
    """The CPUs a cgroup v2 quota allows (``<quota> <period>``, rounded up), or None: no quota, no cgroup v2."""
    try:
        quota, period = cpu_max.read_text().split()[:2]
        return max(1, -(-int(quota) // int(period)))
    except (OSError, ValueError):  # absent, unreadable, or "max" (no quota)
        return None


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity (else the machine's count), capped by a cgroup CPU
    quota (a container or a Kubernetes pod limit), so a pod of 2 CPUs on a 64-core node gets 2 threads."""
    affinity = getattr(os, "sched_getaffinity", None)
    cpus = len(affinity(0)) if affinity is not None else os.cpu_count() or 1
    return min(cpus, cgroup_cpus() or cpus)


_torch_threads = threading.local()  # the intra-op thread count torch was given in this thread


def pin_torch_threads(threads: int | None) -> int:
    """Give torch ``threads`` intra-op threads (unset: every usable CPU) in the calling thread; return its count.
    A Ray worker starts with OMP_NUM_THREADS=1 (an actor of num_cpus=0), and OpenMP keeps a thread's count per
    thread: one set elsewhere does not reach a worker thread that already ran torch, so each thread sets its own.
    Imports torch: call it where torch runs."""
    import torch

    wanted = threads or usable_cpus()
    if getattr(_torch_threads, "count", None) != wanted:
        torch.set_num_threads(wanted)
        _torch_threads.count = wanted
    return int(torch.get_num_threads())
