from __future__ import annotations

import pickle

import pytest

import mesh.errors as errors
from api.errors import STATUS
from mesh.errors import ErrorCode, MemeshError, RateLimited


def all_error_classes() -> list[type[MemeshError]]:
    return [getattr(errors, name) for name in errors.__all__ if name not in ("ErrorCode", "MemeshError")]


@pytest.mark.parametrize("cls", all_error_classes())
def test_every_error_survives_pickling_with_code_and_message(cls: type[MemeshError]) -> None:
    original = cls("boom")
    copy = pickle.loads(pickle.dumps(original))
    assert type(copy) is cls
    assert copy.code == original.code
    assert copy.message == "boom"


def test_rate_limited_keeps_retry_after_and_clamps_to_one() -> None:
    copy = pickle.loads(pickle.dumps(RateLimited("slow down", retry_after=7)))
    assert copy.retry_after == 7
    assert RateLimited("x", retry_after=0).retry_after == 1


def test_every_code_is_raised_by_one_class_and_mapped_once() -> None:
    codes = [cls.code for cls in all_error_classes()]
    assert sorted(codes) == sorted(ErrorCode)
    assert set(STATUS) == set(ErrorCode)


def test_status_table_matches_the_spec() -> None:
    spec = {
        400: {"validation", "dimension_mismatch"},
        401: {"unauthorized"},
        403: {"forbidden"},
        404: {"not_found"},
        409: {"conflict", "transaction"},
        429: {"quota_exceeded", "rate_limited"},
        500: {"internal", "embedding", "config"},
        503: {"unavailable", "storage"},
        504: {"timeout"},
    }
    for status, codes in spec.items():
        assert {c.value for c, (s, _) in STATUS.items() if s == status} == codes
