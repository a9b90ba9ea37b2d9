"""The inbox item's wire form: the one owner of the JSON a pull page and a stream frame carry.

A ``SeqInboxItem`` (spec section 4, ``/openapi.json``) is
``{"delivery_seq": n, "diff": {...}, "delivery": {...}}``. A walk renders the
``diff`` once per walk and the ``delivery`` once per reach (:func:`item_members`);
the inbox stores those members as text and prefixes the sequence when it
serves them (:func:`render_item`); a pull body wraps a page (:func:`pull_body`).
Rendering text once and splicing it keeps a 384-float embedding from being
parsed and re-encoded on every pull. ``tests/unit/test_inbox_wire.py`` holds
every function here against the OpenAPI model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mesh.model import Cell
from mesh.times import rfc3339
from mesh.walk import Criterion, Reach


def diff_json(cell: Cell, diff_id: str, energy: float) -> str:
    """The ``diff`` object of an item, serialised once per walk (embedding floats at 7 significant digits)."""
    vector = ",".join(f"{x:.7g}" for x in cell.embedding.tolist())
    head = json.dumps(
        {
            "id": diff_id,
            "cell_id": cell.id,
            "content": cell.content,
            "cell_type": cell.cell_type.value,
            "layer": cell.layer.value,
            "salience": round(float(cell.salience), 6),
            "energy": round(energy, 6),
            "embedding_engine": cell.engine,
            "provenance": {
                "tenant_id": cell.tenant_id,
                "project_id": cell.project_id,
                "origin_agent": cell.source_agent,
                "scene_id": cell.scene_id,
                "session_id": cell.session_id,
                "created_at": rfc3339(cell.created_at),
            },
        },
        separators=(",", ":"),
    )
    return head[:-1] + f',"embedding":[{vector}]}}'


def delivery_json(reach: Reach, delivered_at: datetime) -> str:
    """The ``delivery`` object of an item: why and how far it travelled."""
    return json.dumps(
        {
            "score": round(reach.score, 6),
            "hops": reach.hops,
            "energy": round(reach.energy, 6),
            "delivered_at": rfc3339(delivered_at),
            "node_id": reach.node_id,
            "node_kind": reach.kind.value,
            "standing": None if reach.standing is None else round(reach.standing, 4),
            "criterion": reach.criterion.value,
        },
        separators=(",", ":"),
    )


def item_members(diff: str, delivery: str) -> str:
    """The stored form of an item: its ``diff`` and ``delivery`` members, without the braces or the sequence."""
    return f'"diff":{diff},"delivery":{delivery}'


def with_withheld(members: str, withheld: int) -> str:
    """``members`` with ``"withheld": n`` added to its ``delivery`` object (the last member) when n > 0:
    matches of the same node and budget window that were not delivered."""
    return f'{members[:-1]},"withheld":{withheld}}}' if withheld else members


CLOSE_MATCH_MEMBER = f'"criterion":"{Criterion.CLOSE_MATCH.value}"'


def is_close_match(members: str) -> bool:
    """Whether a stored item passed as a close match (what the node budget counts apart)."""
    return CLOSE_MATCH_MEMBER in members


def render_item(seq: int, members: str) -> str:
    """One ``SeqInboxItem`` as JSON text (a pull page's element, a stream's text frame)."""
    return f'{{"delivery_seq":{seq},{members}}}'


@dataclass(frozen=True, slots=True)
class InboxDelivery:
    """A delivery a walk makes; ``members`` comes from :func:`item_members`."""

    agent_id: str
    delivery_id: str
    diff_id: str
    project_id: str
    score: float
    members: str
    delivered_at: float  # epoch seconds: the budget window and the retention age count from it
    close: bool = False  # passed as a close match (its own budget count)


@dataclass(frozen=True, slots=True)
class PullResult:
    """A page of an inbox, items already rendered by :func:`render_item`."""

    items: tuple[str, ...]  # in page order (score, or sequence for the stream)
    cursor: int
    window_high: int
    has_more: bool
    max_seq: int  # the largest delivery_seq among the items (0 when none)
    window_low: int = 0  # the first delivery_seq of the window, read scope aside (0 when empty): a gap shows

    @property
    def count(self) -> int:
        return len(self.items)

    @property
    def items_json(self) -> str:
        """The items as one JSON array."""
        return "[" + ",".join(self.items) + "]"


def pull_page(page: PullResult, include_embeddings: bool) -> dict[str, Any]:
    """The pull page as a mapping (the ``PullOut`` fields); each ``diff`` without its embedding unless
    ``include_embeddings`` (surfaces read by models: 384 floats an item would fill a context)."""
    items = json.loads(page.items_json)
    if not include_embeddings:
        for item in items:
            item["diff"].pop("embedding", None)
    return {"items": items, "cursor": page.cursor, "window_high": page.window_high, "has_more": page.has_more}


def pull_body(page: PullResult) -> str:
    """The body of a ``POST /v1/inbox:pull`` answer (the ``PullOut`` model)."""
    more = "true" if page.has_more else "false"
    return f'{{"items":{page.items_json},"cursor":{page.cursor},"window_high":{page.window_high},"has_more":{more}}}'
