"""Secrets the head keeps on disk (the bootstrap key, the erasure signing key): private and durable."""

from __future__ import annotations

import os
from pathlib import Path


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
