"""Finding near-duplicate groups for consolidation: pure and vectorised.

:func:`find_groups` is the O(m² d) part of a consolidation, written so that it
runs as a few matrix products in blocks (BLAS releases the GIL, so an actor
runs it in a worker thread while its event loop keeps serving). ``m`` is
bounded by ``SceneTuning.max_members``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

BLOCK = 512


def find_groups(matrix: npt.NDArray[np.float32], threshold: float, min_group: int) -> list[list[int]]:
    """Greedy near-duplicate groups over the rows of ``matrix`` (unit vectors, in pool order).

    Seeds are taken in row order; a seed not yet in a group gathers every row
    not yet in a group whose cosine with it is at least ``threshold`` (itself
    included). A gathering of at least ``min_group`` rows becomes a group.
    Deterministic: the same rows in the same order give the same groups.
    """
    m = int(matrix.shape[0])
    taken = np.zeros(m, dtype=np.bool_)
    groups: list[list[int]] = []
    for start in range(0, m, BLOCK):
        end = min(m, start + BLOCK)
        if taken[start:end].all():
            continue
        sims = matrix[start:end] @ matrix.T  # (block, m)
        for local in range(end - start):
            seed = start + local
            if taken[seed]:
                continue
            members = np.flatnonzero((sims[local] >= threshold) & ~taken)
            if members.size >= min_group:
                taken[members] = True
                groups.append(members.tolist())
    return groups
