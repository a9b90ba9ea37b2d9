"""What a message asks for: a data part's operation and its flat arguments, or text as a recall (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.helpers.proto_helpers import new_data_part, new_text_part
from a2a.types.a2a_pb2 import Message, Part, Role
from a2a.utils.errors import InvalidParamsError
from starlette.requests import Request

from api.a2a.executor import Caller, CallerContext, operation_of, owner_of
from api.a2a.operations import OPERATIONS, InvalidArguments, PullInbox, Recall, WriteCell, parse_operation
from head.facade import Bucket
from mesh.errors import Unauthorized
from mesh.identity import Principal
from mesh.identity import Role as AgentRole
from mesh.model import CellType

ALICE = Principal(agent_id="agent-a", tenant_id="t1", roles=frozenset({AgentRole.WRITER}))


def message(*parts: Part) -> Message:
    return Message(role=Role.ROLE_USER, message_id="m-1", parts=list(parts))


def test_every_operation_has_its_v1_bucket() -> None:
    buckets = {name: kind.bucket for name, kind in OPERATIONS.items()}
    assert buckets == {
        "recall": Bucket.READ,
        "query": Bucket.READ,
        "get_scene": Bucket.READ,
        "place_beacon": Bucket.READ,  # as POST /v1/beacons: any role places beacons (docs/decisions.md)
        "remove_beacon": Bucket.READ,
        "write_cell": Bucket.WRITE,
        "open_session": Bucket.WRITE,
        "close_session": Bucket.WRITE,
        "pull_inbox": Bucket.INBOX,
    }


def test_numbers_arrive_as_doubles_and_integral_ones_are_integers() -> None:
    """A data part is a protobuf Value: ``k: 3`` is 3.0 on arrival, and must still be the integer 3."""
    recall = operation_of(message(new_data_part({"op": "recall", "text": "retry policy", "k": 3})))
    assert isinstance(recall, Recall) and recall.k == 3 and isinstance(recall.k, int)
    pull = parse_operation({"op": "pull_inbox", "since": 0.0, "ack": 12.0, "limit": 5.0})
    assert isinstance(pull, PullInbox) and (pull.since, pull.ack, pull.limit) == (0, 12, 5)
    written = parse_operation({"op": "write_cell", "content": "c", "cell_type": "Decision", "salience": 1.0})
    assert isinstance(written, WriteCell) and written.cell_type is CellType.DECISION and written.salience == 1.0


@pytest.mark.parametrize(
    ("data", "field", "problem"),
    [
        ({"op": "recall", "text": "x", "k": 2.5}, "k", "whole number"),
        ({"op": "recall", "text": "x", "k": True}, "k", "valid integer"),
        ({"op": "recall", "text": "x", "k": "3"}, "k", "valid integer"),
        ({"op": "recall", "text": "x", "k": 0}, "k", "greater than or equal to 1"),
        ({"op": "recall", "text": ""}, "text", "at least 1 character"),
        ({"op": "recall"}, "text", "Field required"),
        ({"op": "recall", "text": "x", "tenant_id": "t2"}, "tenant_id", "Extra inputs"),  # no identity argument exists
        ({"op": "write_cell", "content": "c", "cell_type": "Gossip"}, "cell_type", "Input should be"),
        ({"op": "write_cell", "content": "c", "cell_type": "Fact", "salience": 1.5}, "salience", "less than or equal to 1"),
        ({"op": "pull_inbox", "ack": -1}, "ack", "greater than or equal to 0"),
        ({"op": "pull_inbox", "ack": 2.0**70}, "ack", "less than or equal to 9223372036854775807"),  # REST's int64
        ({"op": "pull_inbox", "limit": 2.0**40}, "limit", "less than or equal to 2147483647"),
        ({"op": "get_scene", "scene_id": "nope"}, "scene_id", "valid UUID"),  # as REST's path and gRPC's field
        ({"op": "recall", "text": "x", "scene_id": "nope"}, "scene_id", "valid UUID"),
        ({"op": "remove_beacon", "node_id": "x"}, "node_id", "valid UUID"),
        ({"op": "close_session", "session_id": 5.0}, "session_id", "valid string"),
        ({"op": "pull_inbox", "include_embeddings": "yes"}, "include_embeddings", "valid boolean"),
        ({"op": "consolidate_scene", "scene_id": "s"}, "op", "must be one of"),
        ({"text": "no op"}, "op", "must be one of"),
        (["recall"], "data", "must be an object"),
    ],
)
def test_a_bad_data_part_names_what_is_wrong(data: Any, field: str, problem: str) -> None:
    with pytest.raises(InvalidArguments) as refused:
        parse_operation(data)
    assert refused.value.fields[0][0] == field and problem in refused.value.fields[0][1], refused.value.fields


def test_a_bad_message_is_invalid_params_with_field_violations() -> None:
    with pytest.raises(InvalidParamsError) as refused:
        operation_of(message(new_data_part({"op": "recall", "text": "x", "k": 2.5})))
    assert refused.value.message == "validation: k: must be a whole number"
    assert refused.value.data == {"errors": [{"field": "k", "message": "must be a whole number"}]}
    for parts in (
        (),
        (new_text_part("   "),),
        (new_data_part({"op": "recall", "text": "a"}), new_data_part({"op": "recall", "text": "b"})),
    ):
        with pytest.raises(InvalidParamsError, match=r"^validation: parts: "):
            operation_of(message(*parts))


def test_an_id_is_read_as_a_uuid_in_any_spelling_and_written_as_memesh_writes_it() -> None:
    scene = "01A2444F-6918-7050-AE72-C0A7FE45948A"
    for spelling in (scene, "{" + scene + "}", "urn:uuid:" + scene.lower()):
        parsed = parse_operation({"op": "get_scene", "scene_id": spelling})
        assert parsed.scene_id == scene.lower()  # type: ignore[attr-defined]


def test_text_is_a_recall_and_a_data_part_wins_over_commentary() -> None:
    recall = operation_of(message(new_text_part("what do we know"), new_text_part("about retries?")))
    assert isinstance(recall, Recall) and recall.text == "what do we know\nabout retries?" and recall.k == 10
    written = operation_of(
        message(new_text_part("please keep this"), new_data_part({"op": "write_cell", "content": "c", "cell_type": "Fact"}))
    )
    assert isinstance(written, WriteCell)


def request(headers: dict[str, str], principal: Principal | None) -> Request:
    raw = [(k.encode(), v.encode()) for k, v in headers.items()]
    state = {"principal": principal} if principal else {}
    return Request({"type": "http", "method": "POST", "path": "/a2a/v1", "headers": raw, "state": state})


def test_the_call_context_is_the_admitted_agent_without_its_credential() -> None:
    context = CallerContext().build(
        request({"x-service-key": "msh_secret", "authorization": "Bearer msh_secret", "a2a-version": "1.0"}, ALICE)
    )
    assert isinstance(context.user, Caller) and context.user.user_name == ALICE.agent_id
    assert context.state["headers"] == {"a2a-version": "1.0"}
    assert owner_of(context) == "t1/agent-a"
    anonymous = CallerContext().build(request({}, None))
    assert not anonymous.user.is_authenticated
    with pytest.raises(Unauthorized):  # a call without a caller owns no task (never the shared "" owner)
        owner_of(anonymous)
