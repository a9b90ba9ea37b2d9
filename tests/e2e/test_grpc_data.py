"""The gRPC data plane (``memesh.data.v1``) against a running ``memesh serve``, with generated stubs.

Every RPC of ``DataService`` over a real channel, the inbox stream (live
items, progress, resync, resume after the acknowledged cursor, the per-agent
cap, a revoked key ending it), rich errors read with ``grpc_status``, health
and reflection. Answers are held against REST's for the same calls.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pool
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from grpc_status import rpc_status

from api.grpc_data.keyless_streams import PER_PEER
from memesh_proto import data_pb2 as pb
from memesh_proto import data_pb2_grpc
from tests.servers import Server

SERVICE = "memesh.data.v1.DataService"
MEMORIES = [
    "The payment service retries a declined card charge three times before giving up.",
    "Office plants are watered every Monday morning by the facilities team.",
    "Our logo uses a teal colour with a rounded sans-serif typeface.",
    "The quarterly all-hands meeting takes place in the large auditorium.",
]
REVOKED_WITHIN_S = 5.0


def auth(key: str) -> tuple[tuple[str, str], ...]:
    return (("x-service-key", key),)


@pytest.fixture(scope="module")
def channel(server: Server) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.grpc_data_address) as ch:
        grpc.channel_ready_future(ch).result(timeout=10)
        yield ch


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> data_pb2_grpc.DataServiceStub:
    return data_pb2_grpc.DataServiceStub(channel)


def refusal(call: Any, *args: Any, **kwargs: Any) -> tuple[grpc.RpcError, Any]:
    """The RpcError a unary call ends with, and its google.rpc.Status (parsed as a client would)."""
    with pytest.raises(grpc.RpcError) as caught:
        call.with_call(*args, timeout=30, **kwargs)
    rich = rpc_status.from_call(caught.value)  # type: ignore[arg-type]
    assert rich is not None and rich.code == caught.value.code().value[0]  # type: ignore[attr-defined]
    return caught.value, rich


def details(rich: Any, kind: type[Any]) -> list[Any]:
    found = []
    for detail in rich.details:
        message = kind()
        if detail.Unpack(message):
            found.append(message)
    return found


def reason(rich: Any) -> str:
    (info,) = details(rich, error_details_pb2.ErrorInfo)
    assert info.domain == "memesh"
    return str(info.reason)


class Events:
    """A StreamInbox call read by a thread, so every wait for the next event is bounded."""

    def __init__(self, stub: data_pb2_grpc.DataServiceStub, key: str, request: pb.StreamInboxRequest | None = None) -> None:
        self.call = stub.StreamInbox(request or pb.StreamInboxRequest(), metadata=auth(key), timeout=120)
        self.events: queue.Queue[Any] = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for event in self.call:
                self.events.put(event)
        except grpc.RpcError as exc:
            self.events.put(exc)

    def next(self, timeout_s: float = 20.0) -> Any:
        return self.events.get(timeout=timeout_s)

    def next_item(self, timeout_s: float = 30.0) -> pb.SeqInboxItem:
        """The next item, past any progress frame."""
        deadline = time.monotonic() + timeout_s
        while True:
            event = self.next(max(0.1, deadline - time.monotonic()))
            assert isinstance(event, pb.InboxEvent), event
            if event.WhichOneof("event") == "item":
                return event.item

    def close(self) -> None:
        self.call.cancel()
        self.thread.join(10)

    def __enter__(self) -> Events:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def opened(stub: data_pb2_grpc.DataServiceStub, key: str, within_s: float = 5.0) -> Events:
    """A stream that got its first event; retried while the slots of streams just closed come back."""
    deadline = time.monotonic() + within_s
    while True:
        events = Events(stub, key)
        first = events.next()
        if isinstance(first, pb.InboxEvent):
            return events
        events.close()
        assert first.code() is grpc.StatusCode.RESOURCE_EXHAUSTED and time.monotonic() < deadline, first
        time.sleep(0.2)


def test_cells_retrieval_sessions_and_scenes(server: Server, stub: data_pb2_grpc.DataServiceStub) -> None:
    agent = server.issue("grpc-co", "Writer", "grpc-writer")
    key = agent["plaintext_secret"]
    md = auth(key)
    written = stub.WriteCells(
        pb.WriteCellsRequest(cells=[pb.CellInput(content=m, cell_type="Fact") for m in MEMORIES]), metadata=md, timeout=30
    ).nodes
    assert [n.content for n in written] == MEMORIES
    assert all(n.source_agent == agent["agent_id"] and n.tenant_id == "grpc-co" and not n.embedding for n in written)
    one = stub.WriteCell(
        pb.WriteCellRequest(cell=pb.CellInput(content="Refunds settle in five days.", cell_type="Fact"), include_embedding=True),
        metadata=md,
        timeout=30,
    ).node
    assert len(one.embedding) == 384 and one.cell.project_id == "default" and one.layer == "L0"

    question = "How many times do we attempt a rejected credit card payment again?"
    basic = stub.Query(pb.RetrieveRequest(text=question, k=4), metadata=md, timeout=30)
    assert basic.distance_metric == "cosine_distance"
    assert basic.hits[0].node_id == written[0].id and not basic.hits[0].HasField("node")
    assert all(0.0 <= h.distance <= 2.0 for h in basic.hits)
    dense = stub.Query(pb.RetrieveRequest(text=question, k=4, ranking="dense"), metadata=md, timeout=30)
    assert [h.distance for h in dense.hits] == sorted(h.distance for h in dense.hits)  # dense: nearest first
    with server.http(key) as http:  # the same ranking as REST's
        assert [n["id"] for n in http.post("/v1/query", json={"text": question, "k": 4}).json()] == [
            h.node_id for h in basic.hits
        ]
    full = stub.Recall(pb.RetrieveRequest(text=question, k=2, view=pb.FULL), metadata=md, timeout=30)
    assert written[0].id in [h.node_id for h in full.hits]  # the rank blends salience and recency
    assert all(h.node_id == h.node.id and h.node.content and not h.node.embedding for h in full.hits)
    vectors = stub.Recall(pb.RetrieveRequest(text=question, k=1, view=pb.FULL, include_embedding=True), metadata=md, timeout=30)
    assert len(vectors.hits[0].node.embedding) == 384
    by_vector = stub.Query(pb.RetrieveRequest(embedding=one.embedding, k=1), metadata=md, timeout=30)
    assert by_vector.hits[0].node_id == one.id and by_vector.hits[0].distance < 1e-3

    session = stub.OpenSession(pb.OpenSessionRequest(project_id="billing"), metadata=md, timeout=30).session_id
    in_session = stub.WriteCell(
        pb.WriteCellRequest(cell=pb.CellInput(content="Invoices go out on the 1st.", cell_type="Fact", session_id=session)),
        metadata=md,
        timeout=30,
    ).node
    assert in_session.cell.project_id == "billing" and in_session.cell.session_id == session
    stub.CloseSession(pb.CloseSessionRequest(session_id=session), metadata=md, timeout=30)
    error, rich = refusal(
        stub.WriteCell,
        pb.WriteCellRequest(cell=pb.CellInput(content="Late.", cell_type="Fact", session_id=session)),
        metadata=md,
    )
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT and reason(rich) == "VALIDATION"  # type: ignore[attr-defined]

    scene = stub.GetScene(pb.GetSceneRequest(scene_id=written[0].scene_id), metadata=md, timeout=30)
    assert scene.tenant_id == "grpc-co" and scene.member_count >= 1 and not scene.centroid
    assert (
        len(stub.GetScene(pb.GetSceneRequest(scene_id=scene.id, include_embedding=True), metadata=md, timeout=30).centroid) == 384
    )
    listed: list[str] = []
    token = ""
    for _ in range(50):  # one scene a page until the last
        listed_page = stub.ListScenes(pb.ListScenesRequest(page_size=1, page_token=token), metadata=md, timeout=30)
        assert len(listed_page.scenes) <= 1
        listed += [s.id for s in listed_page.scenes]
        token = listed_page.next_page_token
        if not token:
            break
    with server.http(key) as http:
        assert listed == [s["id"] for s in http.get("/v1/scenes", params={"limit": 500}).json()["scenes"]]
    assert len(listed) >= 2 and scene.id in listed
    report = stub.ConsolidateScene(pb.ConsolidateSceneRequest(scene_id=scene.id), metadata=md, timeout=30)
    assert report.scene_id == scene.id == report.scene.id


def test_requests_rest_refuses_are_refused_with_the_field(server: Server, stub: data_pb2_grpc.DataServiceStub) -> None:
    md = auth(server.issue("grpc-val", "Writer", "v")["plaintext_secret"])
    error, rich = refusal(stub.Query, pb.RetrieveRequest(k=3), metadata=md)  # neither text nor embedding
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT and reason(rich) == "VALIDATION"  # type: ignore[attr-defined]
    _, rich = refusal(stub.Recall, pb.RetrieveRequest(text="x", k=0), metadata=md)
    assert [v.field for v in details(rich, error_details_pb2.BadRequest)[0].field_violations] == ["k"]
    _, rich = refusal(stub.Query, pb.RetrieveRequest(text="x", k=1, view=7), metadata=md)  # was read as BASIC
    assert [v.field for v in details(rich, error_details_pb2.BadRequest)[0].field_violations] == ["view"]
    _, rich = refusal(stub.Query, pb.RetrieveRequest(text="x", k=1, ranking="bm25"), metadata=md)
    assert [v.field for v in details(rich, error_details_pb2.BadRequest)[0].field_violations] == ["ranking"]
    _, rich = refusal(
        stub.WriteCells,
        pb.WriteCellsRequest(cells=[pb.CellInput(content="ok", cell_type="Fact"), pb.CellInput(cell_type="Fact")]),
        metadata=md,
    )
    assert [v.field for v in details(rich, error_details_pb2.BadRequest)[0].field_violations] == ["cells[1].content"]
    _, rich = refusal(
        stub.WriteCell, pb.WriteCellRequest(cell=pb.CellInput(content="x", cell_type="Fact", embedding=[1.0, 0.0])), metadata=md
    )
    assert reason(rich) == "DIMENSION_MISMATCH"
    _, rich = refusal(stub.GetScene, pb.GetSceneRequest(scene_id="not-a-uuid"), metadata=md)
    assert reason(rich) == "VALIDATION" and details(rich, error_details_pb2.BadRequest)[0].field_violations[0].field == "scene_id"
    _, rich = refusal(stub.PullInbox, pb.PullInboxRequest(limit=-1), metadata=md)
    assert [v.field for v in details(rich, error_details_pb2.BadRequest)[0].field_violations] == ["limit"]
    too_many = pb.WriteCellsRequest(cells=[pb.CellInput(content=f"c{i}", cell_type="Fact") for i in range(257)])
    for _ in range(2):  # refused before its Write tokens are taken: never a 429 that no retry could end
        error, rich = refusal(stub.WriteCells, too_many, metadata=md)
        assert error.code() is grpc.StatusCode.INVALID_ARGUMENT and "at most 256" in rich.message  # type: ignore[attr-defined]


def test_a_body_that_is_not_its_message_is_invalid_argument_never_unknown(server: Server, channel: grpc.Channel) -> None:
    """grpcio answered a deserializer's DecodeError as UNKNOWN, with the decoder's text and an ERROR traceback
    per call, key or none; the admin service alike."""
    writer = auth(server.issue("grpc-bytes", "Writer", "b")["plaintext_secret"])
    admin = auth(server.key_file.read_text().strip())
    text_field = pb.RetrieveRequest.DESCRIPTOR.fields_by_name["text"].number
    not_utf8 = bytes([text_field << 3 | 2, 2, 0xFF, 0xFE])  # a string field whose bytes are not UTF-8
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as admin_channel:
        calls = [
            (channel.unary_unary(f"/{SERVICE}/Query"), writer),
            (channel.unary_unary(f"/{SERVICE}/WriteCell"), writer),
            (admin_channel.unary_unary("/memesh.admin.v1.AdminService/GetAgent"), admin),
        ]
        for call, md in calls:
            for body in (b"\xff\xff", not_utf8):
                with pytest.raises(grpc.RpcError) as caught:
                    call(body, metadata=md, timeout=30)
                error = caught.value
                assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, error  # type: ignore[attr-defined]
                assert "Decode" not in error.details() and "Request" not in error.details()  # type: ignore[attr-defined]
                if md is writer:  # the data plane's rich status (the admin service's details are "<code>: ...")
                    assert reason(rpc_status.from_call(error)) == "VALIDATION"  # type: ignore[arg-type]
                else:
                    assert error.details().startswith("validation: ")  # type: ignore[attr-defined]
            with pytest.raises(grpc.RpcError) as caught:  # no key: refused for its key first, as any call
                call(b"\xff\xff", timeout=30)
            assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
        with pytest.raises(grpc.RpcError) as caught:  # the admin service: admins only, first
            calls[2][0](b"\xff\xff", metadata=writer, timeout=30)
        assert caught.value.code() is grpc.StatusCode.PERMISSION_DENIED  # type: ignore[attr-defined]
    stream = channel.unary_stream(f"/{SERVICE}/StreamInbox")(b"\xff\xff", metadata=writer, timeout=30)
    with pytest.raises(grpc.RpcError) as ended:
        next(iter(stream))
    assert ended.value.code() is grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    assert "DecodeError" not in server.output()


def test_the_key_and_its_bearer_alias_and_nothing_else(server: Server, stub: data_pb2_grpc.DataServiceStub) -> None:
    key = server.issue("grpc-auth", "Writer", "a")["plaintext_secret"]
    error, rich = refusal(stub.Recall, pb.RetrieveRequest(text="anything"))
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED and reason(rich) == "UNAUTHORIZED"  # type: ignore[attr-defined]
    error, rich = refusal(stub.Recall, pb.RetrieveRequest(text="anything"), metadata=auth("msh_not-a-real-key"))
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED and reason(rich) == "UNAUTHORIZED"  # type: ignore[attr-defined]
    bearer = (("authorization", f"Bearer {key}"),)
    assert stub.Recall(pb.RetrieveRequest(text="anything"), metadata=bearer, timeout=30).distance_metric == "cosine_distance"
    other = server.issue("grpc-auth-other", "Writer", "b")["plaintext_secret"]
    for pair in ((key, other), (other, key)):  # which copy counted was the first; REST read the last
        twice = tuple(("x-service-key", k) for k in pair)
        error, rich = refusal(stub.Recall, pb.RetrieveRequest(text="anything"), metadata=twice)
        assert error.code() is grpc.StatusCode.UNAUTHENTICATED and reason(rich) == "UNAUTHORIZED"  # type: ignore[attr-defined]
    reader = server.issue("grpc-auth", "Reader", "r")["plaintext_secret"]
    error, rich = refusal(
        stub.WriteCell, pb.WriteCellRequest(cell=pb.CellInput(content="x", cell_type="Fact")), metadata=auth(reader)
    )
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED and reason(rich) == "FORBIDDEN"  # type: ignore[attr-defined]


def test_another_tenant_sees_nothing(server: Server, stub: data_pb2_grpc.DataServiceStub) -> None:
    owner = auth(server.issue("grpc-tenant-a", "Writer", "owner")["plaintext_secret"])
    stranger = auth(server.issue("grpc-tenant-b", "Writer", "stranger")["plaintext_secret"])
    node = stub.WriteCell(
        pb.WriteCellRequest(cell=pb.CellInput(content="Tenant A's launch code is under the mat.", cell_type="Fact")),
        metadata=owner,
        timeout=30,
    ).node
    probe = pb.RetrieveRequest(text="launch code under the mat", k=50, filter=pb.Filter(tenant_id="grpc-tenant-a"))
    assert not stub.Recall(probe, metadata=stranger, timeout=30).hits
    assert not stub.Query(probe, metadata=stranger, timeout=30).hits
    assert stub.Query(probe, metadata=owner, timeout=30).hits[0].node_id == node.id
    error, rich = refusal(stub.GetScene, pb.GetSceneRequest(scene_id=node.scene_id), metadata=stranger)
    assert error.code() is grpc.StatusCode.NOT_FOUND and reason(rich) == "NOT_FOUND"  # type: ignore[attr-defined]
    error, _ = refusal(stub.ConsolidateScene, pb.ConsolidateSceneRequest(scene_id=node.scene_id), metadata=stranger)
    assert error.code() is grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]
    assert node.scene_id not in [
        s.id for s in stub.ListScenes(pb.ListScenesRequest(page_size=500), metadata=stranger, timeout=30).scenes
    ]


def test_rate_limited_carries_retry_info_and_retry_after(server: Server, stub: data_pb2_grpc.DataServiceStub) -> None:
    """The shared server's Read bucket holds 60 tokens (tests/servers.py): past them, RESOURCE_EXHAUSTED."""
    md = auth(server.issue("grpc-rate", "Reader", "greedy")["plaintext_secret"])
    absent = pb.GetSceneRequest(scene_id=str(uuid.uuid4()))
    # 200 calls in flight at once: the bucket (20 a second) cannot refill between them however slow each
    # answer is on a busy machine (one call after another at 50 ms each never empties it).
    futures = [stub.GetScene.future(absent, metadata=md, timeout=30) for _ in range(200)]
    errors = [future.exception() for future in futures]
    codes = {error.code() for error in errors}  # type: ignore[union-attr]
    assert codes <= {grpc.StatusCode.NOT_FOUND, grpc.StatusCode.RESOURCE_EXHAUSTED}, codes
    error = next((e for e in errors if e.code() is grpc.StatusCode.RESOURCE_EXHAUSTED), None)  # type: ignore[union-attr]
    assert error is not None, "200 concurrent reads against a bucket of 60 were never refused"
    rich = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert rich is not None and rich.code == error.code().value[0]  # type: ignore[attr-defined]
    assert reason(rich) == "RATE_LIMITED"
    (retry,) = details(rich, error_details_pb2.RetryInfo)
    retry_after = dict(error.trailing_metadata())["retry-after"]  # type: ignore[attr-defined]
    assert retry.retry_delay.seconds >= 1 and retry_after == str(retry.retry_delay.seconds)


def test_beacons_pull_and_ack(server: Server, stub: data_pb2_grpc.DataServiceStub) -> None:
    listener = auth(server.issue("grpc-inbox", "Reader", "listener")["plaintext_secret"])
    writer = auth(server.issue("grpc-inbox", "Writer", "writer")["plaintext_secret"])
    beacon = stub.PlaceBeacon(
        pb.PlaceBeaconRequest(interest="database failover and replication incidents"), metadata=listener, timeout=30
    )
    stray = stub.PlaceBeacon(pb.PlaceBeaconRequest(interest="office catering", ttl_s=3600.0), metadata=listener, timeout=30)
    stub.RemoveBeacon(pb.RemoveBeaconRequest(beacon_id=stray.node_id), metadata=listener, timeout=30)
    cell = stub.WriteCell(
        pb.WriteCellRequest(
            cell=pb.CellInput(
                content="The primary Postgres failed over to the replica; replication lag hit 40s.",
                cell_type="Risk",
                salience=0.9,
            )
        ),
        metadata=writer,
        timeout=30,
    ).node
    deadline = time.monotonic() + 30
    while True:
        page = stub.PullInbox(pb.PullInboxRequest(), metadata=listener, timeout=30)
        if page.items or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    (item,) = page.items
    assert item.diff.cell_id == cell.id and item.delivery.node_id == beacon.node_id and item.delivery.node_kind == "beacon"
    assert not item.diff.embedding and page.cursor == 0 and page.window_high >= item.delivery_seq
    again = stub.PullInbox(pb.PullInboxRequest(since=0, include_embedding=True), metadata=listener, timeout=30)
    assert len(again.items[0].diff.embedding) == 384 and again.cursor == 0  # since: this page only, nothing acknowledged
    acked = stub.PullInbox(pb.PullInboxRequest(ack=item.delivery_seq), metadata=listener, timeout=30)
    assert acked.cursor == item.delivery_seq and not acked.items
    assert stub.AckInbox(pb.AckInboxRequest(ack=0), metadata=listener, timeout=30).cursor == item.delivery_seq  # never rewinds


def test_the_inbox_stream_items_progress_resync_resume_and_cap(server: Server, stub: data_pb2_grpc.DataServiceStub) -> None:
    listener = auth(key := server.issue("grpc-stream", "Reader", "streamer")["plaintext_secret"])
    writer = auth(server.issue("grpc-stream", "Writer", "w")["plaintext_secret"])
    stub.PlaceBeacon(pb.PlaceBeaconRequest(interest="kubernetes cluster upgrades"), metadata=listener, timeout=30)

    def write(version: str) -> str:
        text = f"We upgraded the production Kubernetes cluster to {version}."
        return str(
            stub.WriteCell(
                pb.WriteCellRequest(cell=pb.CellInput(content=text, cell_type="Fact")), metadata=writer, timeout=30
            ).node.id
        )

    with Events(stub, key) as events:
        first = events.next()
        assert first.WhichOneof("event") == "progress" and first.progress.cursor == 0  # caught up at once: empty
        written = write("1.29")
        item = events.next_item()
        assert item.delivery_seq == 1 and item.diff.cell_id == written and not item.diff.embedding
        after = events.next()
        assert after.WhichOneof("event") == "progress" and after.progress.window_high == 1
        assert stub.AckInbox(pb.AckInboxRequest(ack=1), metadata=listener, timeout=30).cursor == 1
        second = write("1.30")
        assert events.next_item().diff.cell_id == second
    with Events(stub, key, pb.StreamInboxRequest(include_embedding=True)) as resumed:
        again = resumed.next_item()
        assert again.delivery_seq == 2 and again.diff.cell_id == second and len(again.diff.embedding) == 384  # after the ack
    with Events(stub, key, pb.StreamInboxRequest(since=10_000)) as ahead:
        resync = ahead.next()
        assert resync.WhichOneof("event") == "resync"
        assert resync.resync.reason == "inbox_reset" and resync.resync.resume_after == 1  # back to the acknowledged cursor
        assert ahead.next_item().delivery_seq == 2
    held = [opened(stub, key) for _ in range(4)]  # the per-agent cap, shared with the WebSocket
    try:
        with Events(stub, key) as over:
            refused = over.next()
            assert isinstance(refused, grpc.RpcError) and refused.code() is grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
            assert reason(rpc_status.from_call(refused)) == "QUOTA_EXCEEDED"  # type: ignore[arg-type]
    finally:
        for stream in held:
            stream.close()


def test_a_revoked_key_ends_its_open_stream_at_once(server: Server, stub: data_pb2_grpc.DataServiceStub) -> None:
    agent = server.issue("grpc-revoke", "Reader", "doomed")
    with Events(stub, agent["plaintext_secret"]) as events:
        assert events.next().WhichOneof("event") == "progress"  # open and idle
        server.admin("agents", "revoke", agent["agent_id"])
        started = time.monotonic()
        ended = events.next(REVOKED_WITHIN_S)
        assert isinstance(ended, grpc.RpcError) and ended.code() is grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
        assert reason(rpc_status.from_call(ended)) == "UNAUTHORIZED"  # type: ignore[arg-type]
        assert time.monotonic() - started < REVOKED_WITHIN_S
    error, _ = refusal(stub.PullInbox, pb.PullInboxRequest(), metadata=auth(agent["plaintext_secret"]))
    assert error.code() is grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]


def test_health_and_reflection(channel: grpc.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", SERVICE):  # no key needed
        answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    database = ProtoReflectionDescriptorDatabase(channel)
    assert {SERVICE, "grpc.health.v1.Health"} <= set(database.get_services())
    pool = descriptor_pool.DescriptorPool(database)
    methods = {m.name for m in pool.FindServiceByName(SERVICE).methods}
    assert methods == set(pb.DESCRIPTOR.services_by_name["DataService"].methods_by_name)
    assert pool.FindMethodByName(f"{SERVICE}.StreamInbox").server_streaming


def test_keyless_streams_cannot_take_the_slots_keyed_calls_need(server: Server, stub: data_pb2_grpc.DataServiceStub) -> None:
    """Health Watch streams need no key and never end by themselves: one address holds at most
    ``PER_PEER`` of them (the next is RESOURCE_EXHAUSTED, ``quota_exceeded``), keyed calls go on being
    served, and a slot comes back when its stream ends."""
    writer = server.issue("keyless", "Writer", "keyless-writer")["plaintext_secret"]
    with grpc.insecure_channel(server.grpc_data_address) as watching:
        health = health_pb2_grpc.HealthStub(watching)
        streams = [health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=60) for _ in range(PER_PEER)]
        try:
            for stream in streams:  # each is open: it sent the current status
                assert next(stream).status == health_pb2.HealthCheckResponse.SERVING
            extra = health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=30)
            with pytest.raises(grpc.RpcError) as caught:
                next(extra)
            assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
            assert reason(rpc_status.from_call(caught.value)) == "QUOTA_EXCEEDED"  # type: ignore[arg-type]
            answer = stub.Query(pb.RetrieveRequest(text="payment retries", k=1), metadata=auth(writer), timeout=30)
            assert list(answer.hits) == []  # served: the tenant has no cells
        finally:
            for stream in streams:
                stream.cancel()
        deadline = time.monotonic() + 10
        while True:  # the cancels reach the server: a slot is free again
            again = health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=30)
            try:
                assert next(again).status == health_pb2.HealthCheckResponse.SERVING
                break
            except grpc.RpcError as exc:
                assert exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED and time.monotonic() < deadline  # type: ignore[attr-defined]
                time.sleep(0.1)
            finally:
                again.cancel()
