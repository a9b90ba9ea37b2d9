"""Import LanceDB without building the pydantic models it never uses here.

``import lancedb`` took 2.9 s of CPU on this machine, most of it pydantic building
validators for the REST namespace client (``lance_namespace_urllib3_client``: hundreds
of request and response models) that a local or object-store table never touches.
Every storage actor is a process of its own and pays that import at start, eight of
them in a default deployment: about half the CPU of starting one.

Guarantee: the models defined *during this import* build on their first use instead
of at class creation (pydantic's own ``defer_build``, which validates exactly as an
eagerly built model does); models defined before or after keep pydantic's defaults.
If pydantic no longer has the setting where we look for it, LanceDB is imported the
ordinary way: slower, never wrong.
"""

from __future__ import annotations

import sys
from types import ModuleType


def import_lancedb() -> ModuleType:
    """``lancedb``, imported once per process with its models' schema builds deferred to first use."""
    loaded = sys.modules.get("lancedb")
    if loaded is not None:
        return loaded
    try:
        from pydantic._internal._config import config_defaults
    except ImportError:  # pragma: no cover - a pydantic that moved its defaults
        import lancedb

        return lancedb
    before = config_defaults["defer_build"]
    config_defaults["defer_build"] = True
    try:
        import lancedb
    finally:
        config_defaults["defer_build"] = before
    return lancedb
