"""What a project or tenant id may hold (``mesh.ids.NAME_EXCLUDED``): one class for the service and its document."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from mesh.erasure import parse_scope
from mesh.errors import ValidationFailed
from mesh.ids import check_project, is_name, is_new_name


def test_a_name_holds_what_isprintable_allows_in_the_basic_plane_less_unassigned_and_anything_beyond() -> None:
    def allowed(c: int) -> bool:
        return c > 0xFFFF or chr(c).isprintable() or unicodedata.category(chr(c)) == "Cn"

    wrong = [hex(c) for c in range(sys.maxunicode + 1) if is_name(chr(c), 1) != allowed(c)]
    assert wrong == []


@pytest.mark.parametrize("name", ["a\tb", "a\nb", "\u0085", "\u00a0", "p\u202e", "\ufeffp", "\ud800", "", "p" * 129])
def test_a_control_format_or_separator_character_is_no_name(name: str) -> None:
    assert not is_name(name, 128)
    with pytest.raises(ValidationFailed):
        check_project(name, 128)
    with pytest.raises(ValidationFailed):
        parse_scope("project", name, None)


@pytest.mark.parametrize("name", ["a b", "p" * 128, "proj\U0001f600", "\U000e0001x", "\u0378", "日本語"])
def test_a_name_may_hold_spaces_within_and_any_character_beyond_the_basic_plane(name: str) -> None:
    assert is_name(name, 128) and is_new_name(name, 128)
    check_project(name, 128, new=True)
    assert parse_scope("project", name, None).id == name  # every project that can be written can be erased


def test_a_new_name_is_not_blank_nor_padded() -> None:
    assert is_name(" p", 128) and not is_new_name(" p", 128) and not is_new_name(" ", 128)
