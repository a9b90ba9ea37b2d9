"""``memesh.data.v1.DataService``: each RPC is its ``/v1`` route over gRPC.

Guarantees:
- Every call is admitted first by :func:`api.admission.admit_grpc` (its key
  from the ``x-service-key`` or ``authorization: Bearer`` metadata, the
  principal cache, the ``AuthFailures`` bucket per peer), charged the bucket
  its REST route charges: Read for Query, Recall, GetCell, ListCells, GetScene,
  ListScenes and the beacons; Write for WriteCell, DeleteCell, the sessions and
  ConsolidateScene, and one
  Write token per cell for WriteCells (a read of more than 100 nodes, one Read
  token more per 100 of its ``k`` or page size, as REST); Inbox for PullInbox, AckInbox and each
  StreamInbox. Identity is never read from a field.
- Then it runs the same use case as the route, on the facade, with the
  request judged by the route's model (:mod:`api.grpc_data.wire`).
- A unary call running past ``timeout_s`` (``server.request_timeout_s``) is
  answered DEADLINE_EXCEEDED (``TIMEOUT``), as REST answers 504; the stream
  is bounded by its client's deadline and the credential instead.
- Every failure is a rich status (:mod:`api.grpc_data.status`); an unexpected
  exception is logged and answered INTERNAL (reason ``INTERNAL``), never
  reaching gRPC as UNKNOWN.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf import empty_pb2

from api.admission import admit_grpc
from api.cursors import decode_cursor, encode_cursor
from api.data.memory import new_cell, node_filter
from api.data.schemas import BeaconIn, CellBatchIn, CellIn, CellListIn, PullIn, QueryIn, SessionIn
from api.grpc_data import wire
from api.grpc_data.status import InvalidRequest, guarded
from api.grpc_data.stream import InboxStreams
from head.facade import Bucket, Memesh
from memesh_proto import data_pb2 as pb
from memesh_proto import data_pb2_grpc
from mesh.errors import TimedOut
from mesh.identity import Principal
from mesh.inbox_wire import pull_page

T = TypeVar("T")
DISTANCE_METRIC = "cosine_distance"
DEFAULT_PAGE_SIZE = 50  # REST's default page of scenes and cells


def _page(request: pb.ListScenesRequest | pb.ListCellsRequest) -> tuple[str | None, int]:
    """The keyset position and page size of a list request (REST's cursor and limit)."""
    if request.page_size < 0:
        raise InvalidRequest("page_size must be at least 0", [("page_size", "must be at least 0")])
    if len(request.page_token) > 256:
        raise InvalidRequest("page_token is not one this service issued", [("page_token", "not issued here")])
    return decode_cursor(request.page_token or None), request.page_size or DEFAULT_PAGE_SIZE


class DataServicer(data_pb2_grpc.DataServiceServicer):  # type: ignore[misc]
    def __init__(self, memesh: Memesh, streams: InboxStreams, timeout_s: float = 30.0) -> None:
        """``timeout_s`` bounds each unary call as ``server.request_timeout_s`` bounds a ``/v1`` request."""
        self.memesh = memesh
        self.streams = streams
        self.timeout_s = timeout_s

    async def _run(
        self, context: grpc.aio.ServicerContext, bucket: Bucket, work: Callable[[Principal], Awaitable[T]], cost: float = 1.0
    ) -> T:
        async def admitted() -> T:
            try:
                async with asyncio.timeout(self.timeout_s):
                    return await work(await admit_grpc(self.memesh, context, bucket, cost))
            except TimeoutError:
                raise TimedOut("the request took too long") from None

        return await guarded(context, admitted)

    # ------------------------------------------------------------------ cells
    async def WriteCell(self, request: pb.WriteCellRequest, context: Any) -> pb.WriteCellResponse:  # noqa: N802
        async def work(p: Principal) -> pb.WriteCellResponse:
            body = wire.validated(CellIn, wire.cell_fields(request.cell), "cell")
            (cell,) = await self.memesh.memory.write_cells(p, [new_cell(body)])
            return pb.WriteCellResponse(node=wire.node(cell, request.include_embedding))

        return await self._run(context, Bucket.WRITE, work)

    async def WriteCells(self, request: pb.WriteCellsRequest, context: Any) -> pb.WriteCellsResponse:  # noqa: N802
        async def work(p: Principal) -> pb.WriteCellsResponse:
            body = wire.validated(CellBatchIn, {"cells": [wire.cell_fields(c) for c in request.cells]})
            self.memesh.charge_batch(p, len(body.cells))  # as REST: a batch too large is refused uncharged
            cells = await self.memesh.memory.write_cells(p, [new_cell(c) for c in body.cells])
            return pb.WriteCellsResponse(nodes=[wire.node(c, request.include_embedding) for c in cells])

        return await self._run(context, Bucket.WRITE, work, cost=0)

    async def GetCell(self, request: pb.CellRef, context: Any) -> pb.Node:  # noqa: N802
        async def work(p: Principal) -> pb.Node:
            cell = await self.memesh.cells.get(p, wire.uuid_field(request.cell_id, "cell_id"))
            return wire.node(cell, request.include_embedding)

        return await self._run(context, Bucket.READ, work)

    async def ListCells(self, request: pb.ListCellsRequest, context: Any) -> pb.ListCellsResponse:  # noqa: N802
        async def work(p: Principal) -> pb.ListCellsResponse:
            after, limit = _page(request)
            self.memesh.charge_read(p, limit, charged=1)
            fields = {
                **wire.given(request, "project_id", "layer", "scene_id", "source_agent"),
                "cell_type": list(request.cell_types) or None,
                "include_superseded": request.include_superseded,
            }
            params = wire.validated(CellListIn, fields)
            cells, more = await self.memesh.cells.list(p, params.node_filter(), after, limit)
            return pb.ListCellsResponse(
                cells=[wire.node(c, request.include_embedding) for c in cells],
                next_page_token=encode_cursor(cells[-1].id) if more and cells else "",
            )

        return await self._run(context, Bucket.READ, work)

    async def DeleteCell(self, request: pb.CellRef, context: Any) -> empty_pb2.Empty:  # noqa: N802
        async def work(p: Principal) -> empty_pb2.Empty:
            await self.memesh.cells.delete(p, wire.uuid_field(request.cell_id, "cell_id"))
            return empty_pb2.Empty()

        return await self._run(context, Bucket.WRITE, work)

    # -------------------------------------------------------------- retrieval
    async def Query(self, request: pb.RetrieveRequest, context: Any) -> pb.RetrieveResponse:  # noqa: N802
        return await self._retrieve(request, context, recall=False)

    async def Recall(self, request: pb.RetrieveRequest, context: Any) -> pb.RetrieveResponse:  # noqa: N802
        return await self._retrieve(request, context, recall=True)

    async def _retrieve(self, request: pb.RetrieveRequest, context: Any, recall: bool) -> pb.RetrieveResponse:
        async def work(p: Principal) -> pb.RetrieveResponse:
            if request.view not in pb.View.values():  # proto3 keeps an enum number it does not know
                raise InvalidRequest(f"view {request.view} is not a View", [("view", "must be BASIC or FULL")])
            body = wire.validated(QueryIn, wire.query_fields(request))
            self.memesh.charge_read(p, body.k, charged=1)
            search = self.memesh.memory.recall_hits if recall else self.memesh.memory.query_hits
            hits = await search(p, body.text, body.embedding, body.k, node_filter(body), body.ranking)
            full = request.view == pb.FULL
            return pb.RetrieveResponse(
                hits=[
                    pb.Hit(
                        node_id=cell.id,
                        distance=round(1.0 - similarity, 6),
                        node=wire.node(cell, request.include_embedding) if full else None,
                    )
                    for cell, similarity in hits
                ],
                distance_metric=DISTANCE_METRIC,
            )

        return await self._run(context, Bucket.READ, work)

    # --------------------------------------------------------------- sessions
    async def OpenSession(self, request: pb.OpenSessionRequest, context: Any) -> pb.OpenSessionResponse:  # noqa: N802
        async def work(p: Principal) -> pb.OpenSessionResponse:
            body = wire.validated(SessionIn, {"project_id": request.project_id})
            session = await self.memesh.memory.open_session(p, body.project_id)
            return pb.OpenSessionResponse(session_id=session.id)

        return await self._run(context, Bucket.WRITE, work)

    async def CloseSession(self, request: pb.CloseSessionRequest, context: Any) -> empty_pb2.Empty:  # noqa: N802
        async def work(p: Principal) -> empty_pb2.Empty:
            await self.memesh.memory.close_session(p, wire.uuid_field(request.session_id, "session_id"))
            return empty_pb2.Empty()

        return await self._run(context, Bucket.WRITE, work)

    # ---------------------------------------------------------------- beacons
    async def PlaceBeacon(self, request: pb.PlaceBeaconRequest, context: Any) -> pb.PlaceBeaconResponse:  # noqa: N802
        async def work(p: Principal) -> pb.PlaceBeaconResponse:
            fields = {"interest": request.interest, **wire.given(request, "expires_at", "ttl_s")}
            body = wire.validated(BeaconIn, fields)
            beacon = await self.memesh.inbox.place_beacon(p, body.interest, body.expires_at, body.ttl_s)
            return pb.PlaceBeaconResponse(node_id=beacon.id)

        return await self._run(context, Bucket.READ, work)

    async def RemoveBeacon(self, request: pb.RemoveBeaconRequest, context: Any) -> empty_pb2.Empty:  # noqa: N802
        async def work(p: Principal) -> empty_pb2.Empty:
            await self.memesh.inbox.remove_beacon(p, wire.uuid_field(request.beacon_id, "beacon_id"))
            return empty_pb2.Empty()

        return await self._run(context, Bucket.READ, work)

    # ----------------------------------------------------------------- scenes
    async def GetScene(self, request: pb.GetSceneRequest, context: Any) -> pb.Scene:  # noqa: N802
        async def work(p: Principal) -> pb.Scene:
            found = await self.memesh.memory.get_scene(p, wire.uuid_field(request.scene_id, "scene_id"))
            return wire.scene(found, request.include_embedding)

        return await self._run(context, Bucket.READ, work)

    async def ListScenes(self, request: pb.ListScenesRequest, context: Any) -> pb.ListScenesResponse:  # noqa: N802
        async def work(p: Principal) -> pb.ListScenesResponse:
            after, limit = _page(request)
            self.memesh.charge_read(p, limit, charged=1)
            scenes, more = await self.memesh.memory.list_scenes(p, request.project_id or None, after, limit)
            return pb.ListScenesResponse(
                scenes=[wire.scene(s, request.include_embedding) for s in scenes],
                next_page_token=encode_cursor(scenes[-1].id) if more and scenes else "",
            )

        return await self._run(context, Bucket.READ, work)

    async def ConsolidateScene(self, request: pb.ConsolidateSceneRequest, context: Any) -> pb.ConsolidateSceneResponse:  # noqa: N802
        async def work(p: Principal) -> pb.ConsolidateSceneResponse:
            report = await self.memesh.memory.consolidate(p, wire.uuid_field(request.scene_id, "scene_id"))
            embed = request.include_embedding
            return pb.ConsolidateSceneResponse(
                scene_id=report.scene.id,
                patterns_created=[wire.node(c, embed) for c in report.patterns],
                cells_superseded=report.superseded,
                scene=wire.scene(report.scene, embed),
            )

        return await self._run(context, Bucket.WRITE, work)

    # ------------------------------------------------------------------ inbox
    async def PullInbox(self, request: pb.PullInboxRequest, context: Any) -> pb.PullInboxResponse:  # noqa: N802
        async def work(p: Principal) -> pb.PullInboxResponse:
            body = wire.validated(PullIn, wire.given(request, "since", "ack", "limit"))
            page = pull_page(await self.memesh.inbox.pull(p, body.since, body.ack, body.limit), request.include_embedding)
            return pb.PullInboxResponse(
                items=[wire.item(i) for i in page["items"]],  # pull_page left out the embeddings unless asked
                cursor=page["cursor"],
                window_high=page["window_high"],
                has_more=page["has_more"],
            )

        return await self._run(context, Bucket.INBOX, work)

    async def AckInbox(self, request: pb.AckInboxRequest, context: Any) -> pb.AckInboxResponse:  # noqa: N802
        async def work(p: Principal) -> pb.AckInboxResponse:
            body = wire.validated(PullIn, {"ack": request.ack})
            assert body.ack is not None
            return pb.AckInboxResponse(cursor=await self.memesh.inbox.ack(p, body.ack))

        return await self._run(context, Bucket.INBOX, work)

    async def StreamInbox(self, request: pb.StreamInboxRequest, context: Any) -> None:  # noqa: N802
        """Server streaming through ``context.write`` (:mod:`api.grpc_data.stream`)."""
        await self.streams.serve(request, context)
