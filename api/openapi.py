"""The machine-readable description of exactly the /v1 router, as OpenAPI 3.0.3.

FastAPI emits OpenAPI 3.1 (JSON Schema 2020-12). 3.0.3 schema objects differ,
so the schemas are converted, not relabelled: ``anyOf [X, null]`` becomes
``nullable``, ``const`` becomes a one-value ``enum``, numeric
``exclusiveMinimum``/``exclusiveMaximum`` become the boolean form, ``examples``
becomes ``example``. FastAPI's own 422 schema is replaced by the spec's error
envelope. The result is checked against the 3.0 meta-schema by the tests.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.openapi.utils import get_openapi

API_VERSION = "1.0.0"


def build_openapi(router: APIRouter, title: str = "memesh data plane") -> dict[str, Any]:
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
    return converted


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
    if "$ref" in out and len(out) > 1:
        ref = out.pop("$ref")
        out["allOf"] = [{"$ref": ref}]
    return out
