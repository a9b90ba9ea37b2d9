"""``json_shape_refusal``: the bound a JSON-RPC message is held to before a protocol SDK parses it."""

from __future__ import annotations

from typing import Any

from api.gate_common import MAX_JSON_DEPTH, MAX_JSON_VALUES, json_shape_refusal


def nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels - 1):
        value = [value]
    return value


def test_values_and_depth_are_counted_to_the_bound_and_no_further() -> None:
    assert json_shape_refusal([0] * (MAX_JSON_VALUES - 1)) is None  # the array and its items: the bound exactly
    assert json_shape_refusal([0] * MAX_JSON_VALUES) is not None
    half = MAX_JSON_VALUES // 2
    assert json_shape_refusal({"a": [0] * (half - 2), "b": [0] * (MAX_JSON_VALUES - half - 1)}) is None  # 3 containers
    assert json_shape_refusal({"a": [0] * (half - 2), "b": [0] * (MAX_JSON_VALUES - half)}) is not None
    assert json_shape_refusal(nested(MAX_JSON_DEPTH)) is None
    assert "deeper" in (json_shape_refusal(nested(MAX_JSON_DEPTH + 1)) or "")
    assert json_shape_refusal("x") is None and json_shape_refusal(None) is None
