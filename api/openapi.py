"""The machine-readable description of exactly the /v1 router, as OpenAPI 3.0.3.

FastAPI emits OpenAPI 3.1 (JSON Schema 2020-12). 3.0.3 schema objects differ,
so the schemas are converted, not relabelled: ``anyOf [X, null]`` becomes
``nullable``, ``const`` becomes a one-value ``enum``, numeric
``exclusiveMinimum``/``exclusiveMaximum`` become the boolean form, ``examples``
becomes ``example``. FastAPI's own 422 schema is replaced by the spec's error
envelope. The result is checked against the 3.0 meta-schema by the tests.

The models cannot know the deployment's limits (the embedding's dimension,
``limits.max_k``, ...), and pydantic must not enforce them: past a limit the
answer is the spec's 400 (``validation``, ``dimension_mismatch``), not a shape
error's 422. So the limits are written into the document afterwards
(:class:`Refinements`): what it calls valid is what the service accepts, and a
client or a fuzzer reading it finds no schema-valid request refused, except
where no schema can say it (a cursor the service did not issue, an
``expires_at`` too soon or too far, a ``project_id`` with an unprintable
character or not the session's, a body over ``server.max_body_bytes``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter
from fastapi.openapi.utils import get_openapi

API_VERSION = "1.0.0"


@dataclass(frozen=True)
class Refinements:
    """JSON Schema keywords the document adds: ``schemas`` per component schema, each with ``properties``
    (property -> keywords) and keywords of its own; ``parameters`` per (path, method, parameter name).
    A keyword given as None is removed."""

    schemas: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    parameters: Mapping[tuple[str, str, str], Mapping[str, Any]] = field(default_factory=dict)


def build_openapi(router: APIRouter, title: str = "memesh data plane", refinements: Refinements | None = None) -> dict[str, Any]:
    doc = get_openapi(
        title=title,
        version=API_VERSION,
        openapi_version="3.0.3",
        description="The memesh /v1 data plane. Authenticate every call with the x-service-key header.",
        routes=router.routes,
    )
    doc["openapi"] = "3.0.3"
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    doc["components"]["securitySchemes"] = {"ServiceKey": {"type": "apiKey", "in": "header", "name": "x-service-key"}}
    doc["security"] = [{"ServiceKey": []}]
    for path in doc.get("paths", {}).values():
        for operation in path.values():
            for response in operation.get("responses", {}).values():
                for media in response.get("content", {}).values():
                    ref = media.get("schema", {}).get("$ref", "")
                    if ref.endswith("/HTTPValidationError"):
                        media["schema"] = {"$ref": "#/components/schemas/ErrorOut"}
    _link(doc, "/v1/beacons", "post", "200", "RemoveBeacon", "delete", "/v1/beacons/{beacon_id}", "beacon_id", "node_id")
    converted: dict[str, Any] = _convert(doc)
    if refinements is not None:
        _refine(converted, refinements)
    return converted


def _refine(doc: dict[str, Any], refinements: Refinements) -> None:
    schemas = doc["components"]["schemas"]
    for name, refinement in refinements.schemas.items():
        schema = schemas[name]  # a renamed model fails the build, not the document silently
        for prop, keywords in refinement.get("properties", {}).items():
            _apply(schema["properties"][prop], keywords)
        _apply(schema, {k: v for k, v in refinement.items() if k != "properties"})
    for (path, method, name), keywords in refinements.parameters.items():
        (parameter,) = [p for p in doc["paths"][path][method].get("parameters", []) if p["name"] == name]
        _apply(parameter["schema"], keywords)


def _apply(schema: dict[str, Any], keywords: Mapping[str, Any]) -> None:
    for key, value in keywords.items():
        if value is None:
            schema.pop(key, None)
        else:
            schema[key] = value


def _link(
    doc: dict[str, Any], path: str, method: str, status: str, name: str, to_method: str, to_path: str, param: str, field: str
) -> None:
    """An OpenAPI link: what a response's ``field`` is for (a client, or a fuzzer's stateful phase, follows it)."""
    operation = doc.get("paths", {}).get(path, {}).get(method)
    target = doc.get("paths", {}).get(to_path, {}).get(to_method)
    if operation is None or target is None:
        return
    response = operation.get("responses", {}).get(status)
    if response is not None:
        response.setdefault("links", {})[name] = {
            "operationId": target["operationId"],
            "parameters": {param: f"$response.body#/{field}"},
        }


def _convert(node: Any) -> Any:
    if isinstance(node, list):
        return [_convert(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _convert(v) for k, v in node.items()}
    for key in ("anyOf", "oneOf"):
        options = out.get(key)
        if isinstance(options, list) and any(o == {"type": "null"} for o in options):
            rest = [o for o in options if o != {"type": "null"}]
            del out[key]
            out["nullable"] = True
            if len(rest) == 1:
                only = rest[0]
                if "$ref" in only:
                    out["allOf"] = [only]
                else:
                    out.update(only)
            else:
                out[key] = rest
    if isinstance(out.get("type"), list):
        types = [t for t in out["type"] if t != "null"]
        if len(types) != len(out["type"]):
            out["nullable"] = True
        out["type"] = types[0] if len(types) == 1 else "string"
    if "const" in out:
        out["enum"] = [out.pop("const")]
    if "examples" in out and isinstance(out["examples"], list):
        examples = out.pop("examples")
        if examples:
            out["example"] = examples[0]
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        value = out.get(bound)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[plain] = value
            out[bound] = True
    if out.get("type") == "integer":  # FastAPI's document writes an integer's bounds as floats (0 as 0.0)
        for plain in ("minimum", "maximum"):
            value = out.get(plain)
            if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
                out[plain] = int(value)
    if "$ref" in out and len(out) > 1:
        ref = out.pop("$ref")
        out["allOf"] = [{"$ref": ref}]
    return out
