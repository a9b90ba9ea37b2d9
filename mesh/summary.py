"""Extractive scene summaries, made without a language model."""

from __future__ import annotations

import heapq

import numpy as np

from mesh.model import Cell, Vector
from mesh.tuning import SceneTuning


def extractive_summary(members: list[Cell], centroid: Vector, tuning: SceneTuning) -> str:
    """Quote the most central, most salient live members, best first.

    Each member scores ``cos(member, centroid) * (0.5 + 0.5 * salience)``; the
    top ``summary_members`` are quoted (each cut to ``summary_chars``) and
    joined with " | ". Deterministic: ties go to the older, then smaller id.
    """
    live = [c for c in members if c.live]
    if not live:
        return ""
    weights = np.stack([c.embedding for c in live]) @ centroid * np.array([0.5 + 0.5 * c.salience for c in live])
    ranked = heapq.nsmallest(
        tuning.summary_members, range(len(live)), key=lambda i: (-float(weights[i]), live[i].created_at, live[i].id)
    )
    quotes = [_clip(" ".join(live[i].content.split()), tuning.summary_chars) for i in ranked]
    return " | ".join(q for q in quotes if q)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)].rstrip() + "…"
