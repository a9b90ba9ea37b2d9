"""Secret files are created whole or not at all: a crash mid-write never leaves a file that stops the next start."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from head.private_files import load_or_create_key, write_private_file


def test_a_private_file_is_whole_0600_and_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "secret.json"
    write_private_file(path, '{"k": 1}')
    assert path.read_text() == '{"k": 1}' and stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(FileExistsError):
        write_private_file(path, '{"k": 2}')
    assert path.read_text() == '{"k": 1}'
    assert sorted(p.name for p in path.parent.iterdir()) == ["secret.json"], "no temporary file is left"


def test_what_a_crash_mid_write_leaves_does_not_stop_the_next_start(tmp_path: Path) -> None:
    path = tmp_path / "card-signing-key.json"
    torn = tmp_path / ".card-signing-key.json.tmp-4242-deadbeef"  # a kill -9 between create and link
    torn.write_text("")
    os.utime(torn, (0, 0))  # long older than STALE_S
    key = load_or_create_key(path, lambda: {"kid": "a"}, lambda d: d, lambda k: k)
    assert key == {"kid": "a"} and json.loads(path.read_text()) == {"kid": "a"}
    assert not torn.exists(), "the stale temporary file was removed"
    assert load_or_create_key(path, lambda: {"kid": "b"}, lambda d: d, lambda k: k) == {"kid": "a"}, "the one key is kept"
