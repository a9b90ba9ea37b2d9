"""Test tiers, by folder:

- ``tests/unit`` (default): pure and in-process tests. Real LanceDB under
  ``tmp_path``, the ``hash`` engine unless a test needs semantics; Ray is
  forbidden (``ray.init`` raises), as in Ray Serve's unit tests.
- ``tests/ray`` (marker ``ray``): actors on one real local Ray shared by the
  whole session (``make test`` runs two test processes with pytest-xdist,
  whole files each; each process starts its own session Ray when its first
  Ray or e2e test asks for one, so a test never sees another's extra node).
- ``tests/e2e`` (marker ``e2e``): ``memesh serve`` as a subprocess joined to
  that same Ray, used over real sockets (HTTP, gRPC, the CLI).
- ``tests/adversarial`` (markers ``e2e`` and ``adversarial``): the same
  servers, tried as an attacker would: schema fuzzing, extreme inputs then a
  restart, kill -9 under load, revocation of open streams, erased bytes on disk.

The server fixtures (``tests/servers.py``) are registered here for every tier.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent


from tests.servers import (  # noqa: E402 - the server fixtures, for every tier
    SHARED,
    SHARED_FIXTURES,
    SHARED_SERVER_FILES,
    admin_server,  # noqa: F401
    oidc_provider,  # noqa: F401
    server,  # noqa: F401
)


class SharedServerScheduling(LoadFileScheduling):
    """``--dist loadfile``, except that every file in ``SHARED_SERVER_FILES`` is one unit of work: those
    files then run one after another on one process, and each shared server starts once in a run and
    stops after the last of them (``tests/servers.py``, ``SharedServers``)."""

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        return "shared-servers" if path in SHARED_SERVER_FILES else path


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> SharedServerScheduling | None:
    return SharedServerScheduling(config, log) if config.getvalue("dist") == "loadfile" else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tiers; refuse a file that uses a shared server without being in ``SHARED_SERVER_FILES``
    (its tests would still pass, but the run would start that server again for it), or one listed there
    that uses none (it would hold the shared files' process for nothing); and order the files
    that share servers so that each server's files are consecutive: those using only the first shared
    fixture, then those using both, then those using only the second (every process orders alike)."""
    SHARED.users = {name: {item.path for item in items if name in getattr(item, "fixturenames", ())} for name in SHARED_FIXTURES}
    sharing = {str(p.relative_to(ROOT)) for p in set().union(*SHARED.users.values())}
    if sharing - SHARED_SERVER_FILES:
        raise pytest.UsageError(f"add {sorted(sharing - SHARED_SERVER_FILES)} to SHARED_SERVER_FILES in tests/servers.py")
    stale = {str(item.path.relative_to(ROOT)) for item in items} & SHARED_SERVER_FILES - sharing
    if stale:
        raise pytest.UsageError(f"{sorted(stale)} use no shared server: take them out of SHARED_SERVER_FILES")
    first, second = (SHARED.users[name] for name in SHARED_FIXTURES)
    # 0: no shared server, 1: the first only, 2: both, 3: the second only (a stable sort keeps each file's order)
    items.sort(
        key=lambda item: {(False, False): 0, (True, False): 1, (True, True): 2, (False, True): 3}[
            (item.path in first, item.path in second)
        ]
    )
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "ray" in parts:
            item.add_marker(pytest.mark.ray)
        elif "e2e" in parts:
            item.add_marker(pytest.mark.e2e)
        elif "adversarial" in parts:
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.adversarial)


@pytest.hookimpl(tryfirst=True)  # before pytest tears the finished test's fixtures down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    SHARED.next_item = nextitem  # a shared server outlives its module only if the next test's file uses it


@pytest.fixture(autouse=True)
def _forbid_ray_in_unit_tests(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("ray") or request.node.get_closest_marker("e2e"):
        return
    import ray

    def refuse(*_: object, **__: object) -> None:
        raise RuntimeError("unit tests must not start Ray; put this test under tests/ray")

    monkeypatch.setattr(ray, "init", refuse)


@pytest.fixture(scope="session")
def ray_address() -> Iterator[str]:
    """One real local Ray for the whole session (per pytest-xdist process); yields its GCS address."""
    import ray

    os.environ.setdefault("RAY_worker_niceness", "0")  # as ``memesh serve`` starts its local Ray (cluster/serve.py)
    # Ray's per-handler timing of its event loops (for its debug dumps, which no test reads): an idle actor
    # process spent about a fifth of its CPU on it, and a run keeps dozens of actor processes alive.
    os.environ.setdefault("RAY_event_stats", "0")
    context = ray.init(namespace="memesh-tests", include_dashboard=False, num_cpus=2, log_to_driver=False)
    try:
        yield str(context.address_info["gcs_address"])
    finally:
        ray.shutdown()
