"""Secrets the head keeps on disk (the bootstrap key, the erasure and card signing keys): private and durable."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

K = TypeVar("K")
STALE_S = 60.0


def write_private_file(path: Path, text: str) -> None:
    """Create ``path`` with mode 0600 (never readable by others, not even briefly), whole or not at all,
    and make it and its directory entry durable before returning. FileExistsError when it exists.

    The text goes to a private temporary file first, made durable, then is linked in as ``path``
    (``link`` refuses an existing name, as ``O_EXCL`` would). So a crash (kill -9) mid-write leaves no
    ``path`` at all, never an empty or torn one that would stop the next start; the temporary file a
    crash leaves is removed by a later call once it is :data:`STALE_S` old."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.tmp-*"):
        with contextlib.suppress(FileNotFoundError):
            if time.time() - stale.stat().st_mtime > STALE_S:  # not another start's file in flight
                stale.unlink()
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Make the entries of ``directory`` (a file created or renamed in it) durable."""
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def load_or_create_key(path: Path, generate: Callable[[], K], load: Callable[[Any], K], dump: Callable[[K], Any]) -> K:
    """A private key kept as JSON in ``path``: read it, or generate one and write it there (0600,
    durable) once. When another start wins the race to create it, its key is read and used, so every
    start of a deployment signs with the one key."""
    if path.exists():
        return load(json.loads(path.read_text()))
    key = generate()
    try:
        write_private_file(path, json.dumps(dump(key)))
    except FileExistsError:
        return load(json.loads(path.read_text()))
    return key
