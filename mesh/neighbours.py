"""A partition's answer to a wave of walks: the scenes nearest each frontier node, as walk candidates.

Guarantees: pure (reads the partition, changes nothing); one matrix product per
tenant for every request of the wave, and one more for every candidate's
relevance; only the requesting walk's tenant is searched; candidates come best
first, ties by id (``VectorIndex.search_many``); each candidate's centroid is a
row of a matrix made for the answer, never the partition's own array, and is
left out (row -1) exactly when the candidate's relevance is below its request's
``centroid_floor`` (the walk sets it to its gate: it never searches around a
scene it prunes, and most candidates are pruned); a scene carried for several
frontier nodes of one tenant's requests has one row, which they share.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt

from mesh.partition import MemoryPartition
from mesh.walk import NeighbourRequest, NodeKind
from mesh.walk_wire import PackedAnswers, joined_matrix

SCENE = NodeKind.SCENE.value


def neighbour_scenes(partition: MemoryPartition, requests: list[NeighbourRequest], first_row: int = 0) -> PackedAnswers:
    """For each walk's wave, each frontier node's nearest live scenes of its tenant as walk candidates
    (similarity to the node, relevance to the diff, the centroid the next wave searches around), packed
    for the wire: one matrix product per tenant for all the requests, one for every candidate's relevance,
    and no per-candidate object (the walker unpacks them). Rows name their centroid as ``first_row`` plus
    its row in the answer's matrix (an answer made in parts: ``PackedAnswers.joined``)."""
    entries: list[int] = []
    frontier_ids: list[str] = []
    counts: list[int] = []
    ids: list[str] = []
    similarity: list[float] = []
    relevance: list[npt.NDArray[np.float32]] = []
    at: list[npt.NDArray[np.int64]] = []
    matrices: list[np.ndarray[Any, Any] | None] = []
    offset = first_row  # rows of the whole answer's matrix taken by earlier parts and tenants
    by_tenant: dict[str, list[int]] = {}
    for n, request in enumerate(requests):
        by_tenant.setdefault(request.tenant_id, []).append(n)
    for tenant_id, members in by_tenant.items():
        flat = [(n, fid, vec) for n in members for fid, vec in requests[n].queries]
        if not flat:
            continue
        ks = [requests[n].k for n, _, _ in flat]
        keep = [requests[n].keep for n, _, _ in flat]
        found, sims, centroids = partition.scene_neighbours_many(tenant_id, np.stack([vec for _, _, vec in flat]), ks, keep)
        # every hit's relevance to its own walk's diff at once: each centroid row against that walk's diff row
        sizes = [len(hits) for hits in found]
        diffs = np.stack([requests[n].diff_vector for n, _, _ in flat])
        of_query = np.repeat(np.arange(len(flat)), sizes)
        scores_of = np.einsum("hd,hd->h", centroids, diffs[of_query])
        floors = np.array([requests[n].centroid_floor for n, _, _ in flat], dtype=np.float64)[of_query]
        carried = scores_of.astype(np.float64) >= floors  # compared as the walk compares (Python floats)
        group_ids = list(chain.from_iterable(found))
        rows, kept = _shared_rows(group_ids, carried, offset)
        at.append(rows)
        relevance.append(scores_of)
        entries += [n for n, _, _ in flat]
        frontier_ids += [frontier_id for _, frontier_id, _ in flat]
        counts += sizes
        ids += group_ids
        similarity += chain.from_iterable(sims)
        matrices.append(centroids[kept])
        offset += len(kept)
    return PackedAnswers(
        len(requests),
        entries,
        frontier_ids,
        counts,
        ids,
        SCENE,
        similarity,
        np.concatenate(relevance) if relevance else np.zeros(0, dtype=np.float32),
        at=np.concatenate(at) if at else None,
        matrix=joined_matrix(matrices),
    )


def _shared_rows(ids: list[str], carried: npt.NDArray[np.bool_], offset: int) -> tuple[npt.NDArray[np.int64], list[int]]:
    """Each carried candidate's row in the answer's matrix (``offset`` on), one row per scene (a scene near
    many frontier nodes of a wave travels once), -1 for the others; and which candidates' centroids make
    those rows, in row order."""
    rows = np.full(len(ids), -1, dtype=np.int64)
    first: dict[str, int] = {}
    kept: list[int] = []
    for i in np.flatnonzero(carried).tolist():
        row = first.get(ids[i])
        if row is None:
            row = first[ids[i]] = offset + len(kept)
            kept.append(i)
        rows[i] = row
    return rows, kept


def neighbour_scene_parts(partition: MemoryPartition, requests: list[NeighbourRequest], part: int) -> Iterator[PackedAnswers]:
    """:func:`neighbour_scenes` of ``requests``, ``part`` requests at a time (what an actor answers between
    two turns of its event loop), computed as each is taken; ``PackedAnswers.joined`` of the parts is the
    answer to all the requests."""
    rows = 0
    for start in range(0, len(requests), part):
        answer = neighbour_scenes(partition, requests[start : start + part], rows)
        rows += 0 if answer.matrix is None else len(answer.matrix)
        yield answer
