"""Secrets the head keeps on disk (the bootstrap key, the erasure and card signing keys): private and durable."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

K = TypeVar("K")


def write_private_file(path: Path, text: str) -> None:
    """Create ``path`` with mode 0600 (never readable by others, not even briefly) and make it and its
    directory entry durable before returning. FileExistsError when it exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


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
