"""The gRPC data plane's rich errors, request judging and stream bookkeeping, in process.

Every spec code goes out as ``google.rpc.Status`` with the one table's gRPC
code and an ``ErrorInfo`` (reason = the code in upper case); ``rate_limited``
alone carries ``RetryInfo`` and ``retry-after``; a refused field is named in
a ``BadRequest``. The abort is checked over a real in-process gRPC channel,
so metadata dropped by the transport would fail it.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

import mesh.errors as errors
from api.data.schemas import CellBatchIn, CellIn, QueryIn
from api.errors import STATUS
from api.grpc_data import wire
from api.grpc_data.status import DOMAIN, InvalidRequest, abort, field_path, guarded, status_of
from api.grpc_data.stream import DELIVERIES_DROPPED, INBOX_RESET, Resync, resync_of
from memesh_proto import data_pb2 as pb
from mesh.errors import DimensionMismatch, ErrorCode, MemeshError, QuotaExceeded, RateLimited
from mesh.inbox import AgentInbox
from mesh.inbox_wire import PullResult, delivery_json, diff_json, item_members, render_item
from mesh.walk import NodeKind, Reach
from tests.unit.test_inbox_wire import a_cell

ERROR_CLASSES: dict[ErrorCode, type[MemeshError]] = {
    cls.code: cls
    for cls in vars(errors).values()
    if isinstance(cls, type) and issubclass(cls, MemeshError) and cls is not MemeshError
}


def an_error(code: ErrorCode) -> MemeshError:
    return ERROR_CLASSES[code](f"{code} happened")


def unpacked(details: Any, kind: type[Any]) -> list[Any]:
    found = []
    for detail in details:
        message = kind()
        if detail.Unpack(message):
            found.append(message)
    return found


def rich_of(metadata: tuple[tuple[str, str | bytes], ...]) -> status_pb2.Status:
    blob = dict(metadata)["grpc-status-details-bin"]
    assert isinstance(blob, bytes)
    return status_pb2.Status.FromString(blob)


def test_every_spec_code_has_a_class_here() -> None:
    assert set(ERROR_CLASSES) == set(ErrorCode)


@pytest.mark.parametrize("code", list(ErrorCode))
def test_every_code_is_the_tables_status_with_its_reason(code: ErrorCode) -> None:
    exc = an_error(code)
    status, details, metadata = status_of(exc)
    assert status is STATUS[code][1]
    assert details == exc.message  # the mesh message, no prefix
    rich = rich_of(metadata)
    assert rich.code == status.value[0] and rich.message == exc.message
    (info,) = unpacked(rich.details, error_details_pb2.ErrorInfo)
    assert info.reason == code.value.upper() and info.domain == DOMAIN
    limited = code is ErrorCode.RATE_LIMITED
    assert bool(unpacked(rich.details, error_details_pb2.RetryInfo)) is limited
    assert ("retry-after" in dict(metadata)) is limited
    assert bool(unpacked(rich.details, error_details_pb2.BadRequest)) is (code is ErrorCode.DIMENSION_MISMATCH)


def test_rate_limited_carries_retry_info_and_retry_after_quota_exceeded_neither() -> None:
    _, _, metadata = status_of(RateLimited("slow down", retry_after=7))
    (retry,) = unpacked(rich_of(metadata).details, error_details_pb2.RetryInfo)
    assert retry.retry_delay.seconds == 7
    assert dict(metadata)["retry-after"] == "7"
    _, _, quota = status_of(QuotaExceeded("full"))
    assert "retry-after" not in dict(quota) and not unpacked(rich_of(quota).details, error_details_pb2.RetryInfo)


def test_refused_fields_are_named_as_proto_paths() -> None:
    assert field_path(("cells", 0, "content")) == "cells[0].content"
    assert field_path(("content",), "cell") == "cell.content"
    with pytest.raises(InvalidRequest) as refused:
        wire.validated(CellBatchIn, {"cells": [{"content": "ok", "cell_type": "Fact"}, {"content": "", "cell_type": "Nope"}]})
    assert {f for f, _ in refused.value.violations} == {"cells[1].content", "cells[1].cell_type"}
    _, _, metadata = status_of(refused.value)
    (bad,) = unpacked(rich_of(metadata).details, error_details_pb2.BadRequest)
    assert {v.field for v in bad.field_violations} == {"cells[1].content", "cells[1].cell_type"}
    with pytest.raises(InvalidRequest) as salience:
        wire.validated(CellIn, wire.cell_fields(pb.CellInput(content="x", cell_type="Fact", salience=1.5)), "cell")
    assert [f for f, _ in salience.value.violations] == ["cell.salience"]
    _, _, dims = status_of(DimensionMismatch("embedding has 3 dimensions"))
    (bad,) = unpacked(rich_of(dims).details, error_details_pb2.BadRequest)
    assert [v.field for v in bad.field_violations] == ["embedding"]


def test_requests_refuse_what_rest_refuses() -> None:
    """Neither text nor embedding, k below 1: the same model as ``POST /v1/query``."""
    with pytest.raises(InvalidRequest, match="give text or embedding"):
        wire.validated(QueryIn, wire.query_fields(pb.RetrieveRequest()))
    with pytest.raises(InvalidRequest) as k:
        wire.validated(QueryIn, wire.query_fields(pb.RetrieveRequest(text="x", k=0)))
    assert [f for f, _ in k.value.violations] == ["k"]
    given = wire.validated(QueryIn, wire.query_fields(pb.RetrieveRequest(text="x", filter=pb.Filter(cell_types=["Risk"]))))
    assert given.k == 10 and given.filter is not None and given.filter.cell_types == ["Risk"]
    assert wire.validated(CellIn, wire.cell_fields(pb.CellInput(content="x", cell_type="Fact", salience=0.0))).salience == 0.0
    with pytest.raises(InvalidRequest) as uuid:
        wire.uuid_field("not-a-uuid", "scene_id")
    assert uuid.value.violations == (("scene_id", "must be a UUID"),)


def test_an_inbox_item_converts_field_for_field() -> None:
    """Every member the one rendering (mesh.inbox_wire) writes has its proto field: strict parse."""
    reach = Reach("a2", "b1", NodeKind.BEACON, 0.75, 2, 0.4)
    members = item_members(diff_json(a_cell(), "d1", 0.9), delivery_json(reach, datetime(2026, 1, 2, tzinfo=UTC)))
    rendered = render_item(7, members)
    strict = json_format.ParseDict(json.loads(rendered), pb.SeqInboxItem())  # raises on any member without a field
    assert strict.diff.provenance.created_at == "2026-01-02T03:04:05Z" and len(strict.diff.embedding) == 8
    item = wire.item_of(rendered)
    assert item.delivery_seq == 7 and item.diff.content == a_cell().content and not item.diff.embedding
    assert not item.diff.provenance.HasField("scene_id")  # null stays unset
    assert item.delivery.node_kind == "beacon" and item.delivery.hops == 2
    assert len(wire.item_of(rendered, include_embedding=True).diff.embedding) == 8


def page(window_low: int, window_high: int, cursor: int = 0) -> PullResult:
    return PullResult((), cursor, window_high, False, 0, window_low)


def test_the_stream_resyncs_when_its_position_no_longer_matches_the_inbox() -> None:
    assert resync_of(5, page(6, 9)) is None  # the next delivery follows
    assert resync_of(5, page(0, 5)) is None  # nothing new
    assert resync_of(50, page(0, 9, cursor=4)) == Resync(INBOX_RESET, 4)  # the inbox never reached 50
    assert resync_of(5, page(8, 9)) == Resync(DELIVERIES_DROPPED, 7)  # 6 and 7 left before they were sent


def test_a_window_reports_its_first_sequence_so_a_gap_shows() -> None:
    inbox = AgentInbox()
    for i in range(5):
        inbox.enqueue(f"d{i}", f"diff{i}", "p", 0.5, "{}", delivered_at=float(i))
    inbox.commit(5)
    assert inbox.pull(None, None, None, 10, lambda _: True).window_low == 1
    inbox.trim(now=10.0, acked_max_age_s=1.0, max_deliveries=2)  # unacknowledged 1..3 leave past the cap
    assert inbox.pull(None, None, None, 10, lambda _: True).window_low == 4
    assert inbox.pull(5, None, None, 10, lambda _: True).window_low == 0  # an empty window


async def test_one_abort_keeps_retry_after_and_the_details_over_a_real_channel() -> None:
    """``abort_with_status`` would drop trailing metadata set before it: everything goes in one abort."""

    async def refuse(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await abort(context, RateLimited("rate limit of the Read bucket reached", retry_after=3))
        return b""

    async def explode(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        async def work() -> bytes:
            raise KeyError("a bug")

        return await guarded(context, work)

    handlers = {
        "Refuse": grpc.unary_unary_rpc_method_handler(refuse),
        "Explode": grpc.unary_unary_rpc_method_handler(explode),
    }
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.T", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary("/t.T/Refuse")(b"")
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call
            assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert dict(refused.value.trailing_metadata())["retry-after"] == "3"
            rich = await rpc_status.aio.from_call(call)
            assert rich is not None
            (info,) = unpacked(rich.details, error_details_pb2.ErrorInfo)
            (retry,) = unpacked(rich.details, error_details_pb2.RetryInfo)
            assert info.reason == "RATE_LIMITED" and retry.retry_delay.seconds == 3
            call = channel.unary_unary("/t.T/Explode")(b"")
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await call
            assert failed.value.code() is grpc.StatusCode.INTERNAL  # never UNKNOWN
            rich = await rpc_status.aio.from_call(call)
            assert rich is not None and unpacked(rich.details, error_details_pb2.ErrorInfo)[0].reason == "INTERNAL"
    finally:
        await asyncio.wait_for(server.stop(None), 10)
