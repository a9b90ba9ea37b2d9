"""The CPUs this process may use: what sizes the model's threads and the embedder pool by default.

Reads only the process's affinity and the cgroup v2 quota, so importing it costs nothing (settings use it).
"""

from __future__ import annotations

import os
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
