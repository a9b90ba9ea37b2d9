"""/openapi.json states the deployment's limits: a body the document calls valid is accepted, one it calls
invalid is refused with the spec's envelope (400 past a bound, 422 for a shape), at each bound and one past it.

schemathesis's ``positive_data_acceptance`` (a default check) found schema-valid bodies refused: a ``k``
over ``limits.max_k``, a vector of the wrong length, both ``text`` and ``embedding``, a blank text.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from openapi_schema_validator import OAS30Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4

from head.inbox_service import InboxLimits
from head.memory_service import MemoryLimits
from tests.unit.conftest import Api

LIMITS = MemoryLimits()
INBOX = InboxLimits()
DIMS = 384
UNIT = [0.0] * (DIMS - 1) + [1.0]
BATCHED = {"content": "b", "cell_type": "Fact"}


def validator(document: dict[str, Any], schema: str) -> Any:
    resource = Resource.from_contents(document, default_specification=DRAFT4)
    registry: Registry[Any] = Registry().with_resource("memesh:openapi", resource)
    return OAS30Validator({"$ref": f"memesh:openapi#/components/schemas/{schema}"}, registry=registry)


CASES: list[tuple[str, str, dict[str, Any], bool, int]] = [
    # (path, component schema, body, valid per the document, status)
    ("/v1/query", "QueryIn", {"text": "disk", "k": LIMITS.max_k}, True, 200),
    ("/v1/query", "QueryIn", {"text": "disk", "k": LIMITS.max_k + 1}, False, 400),
    ("/v1/recall", "QueryIn", {"text": "d" * LIMITS.max_text_chars}, True, 200),
    ("/v1/recall", "QueryIn", {"text": "d" * (LIMITS.max_text_chars + 1)}, False, 400),
    ("/v1/query", "QueryIn", {"text": " \t\n"}, False, 400),
    ("/v1/query", "QueryIn", {"text": "disk", "embedding": None}, True, 200),
    ("/v1/query", "QueryIn", {"text": "disk", "embedding": UNIT}, False, 400),
    ("/v1/query", "QueryIn", {}, False, 422),
    ("/v1/recall", "QueryIn", {"embedding": UNIT}, True, 200),
    ("/v1/recall", "QueryIn", {"embedding": [0.0] * DIMS}, False, 400),
    ("/v1/recall", "QueryIn", {"embedding": UNIT[:-1]}, False, 400),
    ("/v1/cells", "CellIn", {"content": "c" * LIMITS.max_content_chars, "cell_type": "Fact"}, True, 201),
    ("/v1/cells", "CellIn", {"content": "c" * (LIMITS.max_content_chars + 1), "cell_type": "Fact"}, False, 400),
    ("/v1/cells", "CellIn", {"content": "  ", "cell_type": "Fact"}, False, 400),
    ("/v1/cells", "CellIn", {"content": "v", "cell_type": "Fact", "embedding": [*UNIT, 0.0]}, False, 400),
    ("/v1/cells", "CellIn", {"content": "p", "cell_type": "Fact", "project_id": "p" * 128}, True, 201),
    ("/v1/cells", "CellIn", {"content": "p", "cell_type": "Fact", "project_id": "p" * 129}, False, 400),
    ("/v1/cells:batch", "CellBatchIn", {"cells": [BATCHED] * LIMITS.max_batch_cells}, True, 201),
    ("/v1/cells:batch", "CellBatchIn", {"cells": [BATCHED] * (LIMITS.max_batch_cells + 1)}, False, 400),
    ("/v1/beacons", "BeaconIn", {"interest": "disks", "ttl_s": INBOX.min_beacon_ttl_s}, True, 200),
    ("/v1/beacons", "BeaconIn", {"interest": "disks", "ttl_s": INBOX.min_beacon_ttl_s / 2}, False, 400),
    ("/v1/beacons", "BeaconIn", {"interest": "disks", "ttl_s": INBOX.max_beacon_ttl_s * 2}, False, 400),
    ("/v1/beacons", "BeaconIn", {"interest": "disks", "ttl_s": 60.0, "expires_at": "2999-01-01T00:00:00Z"}, False, 400),
    ("/v1/beacons", "BeaconIn", {"interest": "disks", "ttl_s": 60.0, "expires_at": None}, True, 200),
    ("/v1/beacons", "BeaconIn", {"interest": " "}, False, 400),
    ("/v1/cells", "CellIn", {"content": "\x1c\x85\u3000", "cell_type": "Fact"}, False, 400),  # blank to str.strip
    ("/v1/beacons", "BeaconIn", {"interest": "\ufeff"}, True, 200),  # not white space to Python (it is to ECMA-262)
    # the fuzzing review: the document let any project id through, and the service refused non-printable ones
    ("/v1/cells", "CellIn", {"content": "p", "cell_type": "Fact", "project_id": "a\tb"}, False, 400),
    ("/v1/cells", "CellIn", {"content": "p", "cell_type": "Fact", "project_id": "\u00a0"}, False, 400),
    ("/v1/cells", "CellIn", {"content": "p", "cell_type": "Fact", "project_id": "a\u0085b\n"}, False, 400),
    ("/v1/cells", "CellIn", {"content": "p", "cell_type": "Fact", "project_id": "proj \U0001f600\U000e0001"}, True, 201),
    ("/v1/sessions", "SessionIn", {"project_id": "a\u200bb"}, False, 400),
    ("/v1/sessions", "SessionIn", {"project_id": "a b"}, True, 200),
    # and its int64 bound was the float 2**63, one past what the service takes
    ("/v1/inbox:pull", "PullIn", {"ack": 2**63 - 1, "since": 2**63 - 1}, True, 200),
    ("/v1/inbox:pull", "PullIn", {"ack": 2**63}, False, 400),
    ("/v1/inbox:pull", "PullIn", {"since": 2**63}, False, 400),
]


@pytest.mark.parametrize(("path", "schema", "body", "valid", "status"), CASES, ids=[f"{c[0]}-{n}" for n, c in enumerate(CASES)])
async def test_the_document_calls_valid_exactly_what_the_service_accepts(
    api: Api, path: str, schema: str, body: dict[str, Any], valid: bool, status: int
) -> None:
    document = (await api.http.get("/openapi.json")).json()
    assert validator(document, schema).is_valid(body) is valid
    response = await api.send("POST", path, await api.key(), body)
    assert response.status_code == status, response.text
    if not valid:
        assert set(response.json()) == {"error"}


async def test_list_limits_and_the_embedding_length_are_the_deployments(api: Api) -> None:
    document = (await api.http.get("/openapi.json")).json()
    for path in ("/v1/cells", "/v1/scenes"):
        (limit,) = [p for p in document["paths"][path]["get"]["parameters"] if p["name"] == "limit"]
        assert limit["schema"]["maximum"] == LIMITS.max_list
        key = await api.key()
        assert (await api.send("GET", f"{path}?limit={LIMITS.max_list}", key)).status_code == 200
        assert (await api.send("GET", f"{path}?limit={LIMITS.max_list + 1}", key)).status_code == 400
    embedding = document["components"]["schemas"]["QueryIn"]["properties"]["embedding"]
    assert embedding["minItems"] == embedding["maxItems"] == api.memesh.embedder.dims == DIMS


async def test_every_integer_bound_in_the_document_is_an_integer(api: Api) -> None:
    """FastAPI writes an integer's bounds as floats: 2**63 - 1 became 2**63, which the service refuses."""
    document = (await api.http.get("/openapi.json")).json()
    floats: list[Any] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "integer":
                floats.extend(node[b] for b in ("minimum", "maximum") if isinstance(node.get(b), float))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    assert floats == []
    ack = document["components"]["schemas"]["PullIn"]["properties"]["ack"]
    assert ack["maximum"] == 2**63 - 1 and ack["minimum"] == 0


async def test_a_project_filter_the_document_calls_valid_is_taken(api: Api) -> None:
    document = (await api.http.get("/openapi.json")).json()
    key = await api.key()
    for path in ("/v1/cells", "/v1/scenes"):
        (project,) = [p for p in document["paths"][path]["get"]["parameters"] if p["name"] == "project_id"]
        assert project["schema"]["pattern"]
        for value, status in (("a\U0001f600", 200), ("a\tb", 400), ("\u3000", 400)):
            response = await api.http.get(path, params={"project_id": value}, headers={"x-service-key": key})
            assert response.status_code == status, (path, value, response.text)


async def test_every_pattern_in_the_document_is_one_a_fuzzer_keeps(api: Api) -> None:
    """schemathesis drops a pattern its Rust validator cannot compile (a class with surrogates in it was one),
    and then generates values the service refuses."""
    from schemathesis.core.jsonschema.patterns import enforced_pattern

    text = (await api.http.get("/openapi.json")).text
    patterns = {json.loads(f'"{raw}"') for raw in re.findall(r'"pattern": ?"((?:[^"\\]|\\.)*)"', text)}
    assert len(patterns) >= 2  # the not-blank texts and the project ids
    assert [p for p in patterns if enforced_pattern(p) is None] == []


def test_not_blank_is_exactly_what_str_strip_leaves_something_of() -> None:
    """The pattern's class, read as any dialect reads literal characters, against ``str.isspace`` for every
    code point (the review found ``\\S`` differs in ECMA-262 and RE2)."""
    import re
    import sys

    from api.data.documented_limits import NOT_BLANK

    pattern = re.compile(NOT_BLANK)
    assert "\\" not in NOT_BLANK  # no escape a dialect could read its own way
    wrong = [c for c in range(sys.maxunicode + 1) if (pattern.fullmatch(chr(c)) is None) != chr(c).isspace()]
    assert wrong == []


async def test_a_vector_with_an_infinite_number_is_invalid_to_the_document_and_refused(api: Api) -> None:
    document = (await api.http.get("/openapi.json")).json()
    body = '{"content": "v", "cell_type": "Fact", "embedding": [1e400' + ", 0" * (DIMS - 1) + "]}"
    assert not validator(document, "CellIn").is_valid(json.loads(body))  # json reads 1e400 as infinity
    response = await api.http.post(
        "/v1/cells", content=body, headers={"x-service-key": await api.key(), "content-type": "application/json"}
    )
    assert response.status_code == 400 and response.json()["error"]["code"] == "validation"
