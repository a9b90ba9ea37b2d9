"""Beacons, the acknowledged pull and the WebSocket inbox stream (/v1).

Stream protocol (``GET /v1/inbox``; the ``x-service-key`` header is admitted
before the upgrade by :func:`api.admission.admit_connection`, one token of the
``Inbox`` bucket: 401 / 429 answered as HTTP, never upgraded):
- server -> client: one SeqInboxItem JSON object per text frame, ascending
  ``delivery_seq``, starting after the acknowledged cursor;
  ``{"cursor": N}`` after an ack frame was applied;
  ``{"error": {"code", "message"}}`` before the server closes on a bad frame.
- client -> server: ``{"ack": N}`` under the pull's cursor rules.
A reconnect resumes after the acknowledged cursor, so whatever was sent but
not acknowledged is sent again (at-least-once).

Limits: an agent holds at most ``limits.max_inbox_streams_per_agent`` streams
on a head, a tenant ``limits.max_inbox_streams_per_tenant``, and a head
``limits.max_inbox_streams`` (429 ``quota_exceeded``
before the upgrade beyond). Each ack frame is charged to the ``Inbox`` bucket
as it is read; frames are answered in the order they came (a refused one gets an ``{"error": ...}`` frame, is not applied, and the
stream stays open). The key is checked again before every item and ack, and
at once when the agent is revoked, suspended or rotated on this head: the
stream then sends ``{"error": {"code": "unauthorized", ...}}`` and closes
with 1008 before anything else is sent (frames and close codes:
:mod:`api.websocket`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Body, Response, WebSocket
from starlette.websockets import WebSocketState

from api.admission import Credential, admit_connection, service_key
from api.data.schemas import ERROR_RESPONSES, INT64_MAX, BeaconIn, BeaconOut, OkOut, PullIn, PullOut
from api.deps import Core, Drainer, Reader
from api.websocket import close_with, deny, error_frame, first_to_finish
from head.facade import Bucket, Memesh
from mesh.errors import MemeshError, RateLimited, Unavailable, ValidationFailed

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES)
STREAM_WAIT_S = 15.0
STREAM_RETRIES = 10


@router.post("/beacons", response_model=BeaconOut, tags=["inbox"], summary="Place a standing interest")
async def place_beacon(body: BeaconIn, principal: Reader, core: Core) -> BeaconOut:
    beacon = await core.inbox.place_beacon(principal, body.interest, body.expires_at, body.ttl_s)
    return BeaconOut(node_id=UUID(beacon.id))


@router.delete("/beacons/{beacon_id}", response_model=OkOut, tags=["inbox"], summary="Remove one of your beacons")
async def remove_beacon(beacon_id: UUID, principal: Reader, core: Core) -> OkOut:
    await core.inbox.remove_beacon(principal, str(beacon_id))
    return OkOut()


@router.post("/inbox:pull", response_model=PullOut, tags=["inbox"], summary="Drain your inbox with an acknowledgement cursor")
async def pull(principal: Drainer, core: Core, body: Annotated[PullIn | None, Body()] = None) -> Response:
    body = body or PullIn()
    page = await core.inbox.pull(principal, body.since, body.ack, body.limit)
    content = (
        f'{{"items":{page.items_json},"cursor":{page.cursor},'
        f'"window_high":{page.window_high},"has_more":{"true" if page.has_more else "false"}}}'
    )
    return Response(content=content, media_type="application/json")


@router.get("/inbox", include_in_schema=False)
async def stream_without_upgrade() -> None:
    """``/v1/inbox`` over plain HTTP: a GET without the WebSocket upgrade is 400 ``validation`` (it was 404, as
    if the path did not exist), and another method 405 with ``Allow: GET`` (the ``/v1`` rule)."""
    raise ValidationFailed("GET /v1/inbox is the inbox stream: open it as a WebSocket (Upgrade: websocket)")


@router.websocket("/inbox")
async def stream(websocket: WebSocket, core: Core) -> None:
    with contextlib.ExitStack() as held:
        try:
            principal = await admit_connection(core, websocket, Bucket.INBOX)  # 401 / 429 before any upgrade
            held.enter_context(core.inbox.stream_slot(principal))  # past a stream cap: 429, before any upgrade
        except MemeshError as exc:
            await deny(websocket, exc)
            return
        changed = held.enter_context(core.identity.watch(principal.agent_id))
        await websocket.accept()
        await _serve(websocket, core, Credential(core, service_key(websocket), principal, changed))


async def _serve(websocket: WebSocket, memesh: Memesh, credential: Credential) -> None:
    done = await first_to_finish(
        asyncio.create_task(_send_loop(websocket, memesh, credential)),
        asyncio.create_task(_receive_loop(websocket, memesh, credential)),
        asyncio.create_task(credential.until_refused()),
    )
    failure = next((t.exception() for t in done if not t.cancelled() and t.exception() is not None), None)
    if failure is not None:
        if not isinstance(failure, MemeshError):
            log.warning("inbox stream stopped: %r", failure)
        error = failure if isinstance(failure, MemeshError) else Unavailable("the inbox stream failed")
        await close_with(websocket, error)


async def _send_loop(websocket: WebSocket, memesh: Memesh, credential: Credential) -> None:
    """Send every delivery after the acknowledged cursor, then each new one as it commits.

    The key is checked again before every item sent. A shard that is restarting
    is retried (bounded); past that the loop fails and the connection is closed
    with an error frame, never left open and silent.
    """
    sent = await memesh.inbox.cursor(credential.principal)
    failures = 0
    while websocket.application_state is WebSocketState.CONNECTED:
        try:
            principal = await credential.check()
            page = await memesh.inbox.next_page(principal, sent, STREAM_WAIT_S)  # waits for one, in the shard
        except Unavailable:
            failures += 1
            if failures > STREAM_RETRIES:
                raise
            await asyncio.sleep(0.2 * failures)
            continue
        failures = 0
        for item in page.items:  # rendered once, when the walk delivered it
            await credential.check()  # the key must still hold when each item goes out (a cache hit while it does)
            await websocket.send_text(item)
        sent = max(sent, page.window_high)  # past what the key's read scope hides too: never asked for again


async def _receive_loop(websocket: WebSocket, memesh: Memesh, credential: Credential) -> None:
    """Read ack frames and charge each as it arrives; apply them in order and answer each in order.

    The charge is decided when a frame is read, not after the acks before it were applied, so a burst
    meets the ``Inbox`` bucket as sent, however long the shard takes. At most :data:`ACK_BACKLOG` frames
    wait to be answered; past that the stream is not read (TCP pushes back on the sender).
    """
    answers: asyncio.Queue[_Answer] = asyncio.Queue(maxsize=ACK_BACKLOG)
    reader = asyncio.create_task(_read_acks(websocket, memesh, credential, answers))
    try:
        while True:
            answer = await answers.get()
            if isinstance(answer, _Close):
                if answer.error is not None:
                    await close_with(websocket, answer.error, answer.code)
                return
            if isinstance(answer, str):
                await websocket.send_text(answer)
                continue
            principal = await credential.check()  # a key refused since the frame was read applies nothing
            cursor = await memesh.inbox.ack(principal, answer)
            await websocket.send_text(json.dumps({"cursor": cursor}))
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


ACK_BACKLOG = 1024


@dataclass(frozen=True)
class _Close:
    """The end of the frames: the peer left (no error), or a bad frame closes the stream."""

    error: MemeshError | None = None
    code: int | None = None


_Answer = int | str | _Close  # an ack to apply, a refusal frame to send, or the end


async def _read_acks(websocket: WebSocket, memesh: Memesh, credential: Credential, answers: asyncio.Queue[_Answer]) -> None:
    try:
        await _read_frames(websocket, memesh, credential, answers)
    except Exception as exc:  # noqa: BLE001 -- the reader never dies silently: the stream closes with 1011
        log.warning("inbox stream reader stopped: %r", exc)
        await answers.put(_Close(Unavailable("the inbox stream failed")))


async def _read_frames(websocket: WebSocket, memesh: Memesh, credential: Credential, answers: asyncio.Queue[_Answer]) -> None:
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            await answers.put(_Close())
            return
        text = message.get("text")
        try:
            if text is None:
                raise ValidationFailed('frames must be text: {"ack": N}')
            frame = json.loads(text)
            ack = frame.get("ack") if isinstance(frame, dict) else None
            if (
                not isinstance(frame, dict)
                or set(frame) != {"ack"}
                or not isinstance(ack, int)
                or isinstance(ack, bool)
                or not 0 <= ack <= INT64_MAX
            ):
                raise ValidationFailed('frames must be {"ack": N} with N an int64 >= 0')
            principal = await credential.check()
            try:
                memesh.charge(principal, Bucket.INBOX)  # an ack frame costs what a pull does
            except RateLimited as exc:
                await answers.put(error_frame(exc.code, f"{exc.message}; retry in {exc.retry_after} s"))
                continue
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
            await answers.put(_Close(ValidationFailed("frames must be JSON objects")))
            return
        except MemeshError as exc:
            await answers.put(_Close(exc, 1003 if text is None else None))
            return
        await answers.put(ack)
