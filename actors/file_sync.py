"""The local file system under a LanceDB database: where it is, and flushing it to stable storage."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any


def local_path(uri: str) -> Path | None:
    """The directory of a database on a local file system (None for an object store URI)."""
    if "://" in uri and not uri.startswith("file://"):
        return None
    return Path(uri.removeprefix("file://"))


_libc: Any = None


def sync_file_system(path: Path) -> None:
    """Flush every dirty page of the file system holding ``path`` to stable storage (Linux
    ``syncfs``; ``os.sync`` elsewhere). Blocking: call it from a worker thread."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    target = path if path.exists() else path.parent
    fd = os.open(target, os.O_RDONLY)
    try:
        if getattr(_libc, "syncfs", None) is None or _libc.syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)
