"""A partition's answer to a wave of walks: the scenes nearest each frontier node, as walk candidates.

Guarantees: pure (reads the partition, changes nothing); one matrix product per
tenant for every request of the wave; only the requesting walk's tenant is
searched; candidates come best first, ties by id (``VectorIndex.search_many``).
"""

from __future__ import annotations

import numpy as np

from mesh.partition import MemoryPartition
from mesh.walk import Candidate, NeighbourRequest, NodeKind
from mesh.walk_wire import WaveAnswers


def neighbour_scenes(partition: MemoryPartition, requests: list[NeighbourRequest]) -> list[dict[str, list[Candidate]]]:
    """For each walk's wave, each frontier node's nearest live scenes of its tenant as walk candidates
    (similarity to the node, relevance to the diff, the centroid the next wave searches around): one
    matrix product per tenant for all the requests."""
    answers = WaveAnswers({} for _ in requests)  # pickled packed: one matrix, no per-candidate objects
    by_tenant: dict[str, list[int]] = {}
    for n, request in enumerate(requests):
        by_tenant.setdefault(request.tenant_id, []).append(n)
    for tenant_id, members in by_tenant.items():
        flat = [(n, fid, vec) for n in members for fid, vec in requests[n].queries]
        if not flat:
            continue
        k = max(requests[n].k for n in members)
        hits = partition.scene_neighbours_many(tenant_id, np.stack([vec for _, _, vec in flat]), k)
        for (n, frontier_id, _), found in zip(flat, hits, strict=True):
            request = requests[n]
            found = found[: request.k]
            if not found:
                answers[n][frontier_id] = []
                continue
            centroids = np.stack([s.centroid for s, _ in found])  # a copy: a walk never shares the partition's arrays
            relevance = (centroids @ request.diff_vector).tolist()
            answers[n][frontier_id] = [
                Candidate(s.id, NodeKind.SCENE, sim, rel, None, centroid)
                for (s, sim), rel, centroid in zip(found, relevance, centroids, strict=True)
            ]
    return answers
