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

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent


from tests.servers import admin_server, oidc_provider, server  # noqa: E402, F401 - session fixtures for every tier


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "ray" in parts:
            item.add_marker(pytest.mark.ray)
        elif "e2e" in parts:
            item.add_marker(pytest.mark.e2e)
        elif "adversarial" in parts:
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.adversarial)


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
    context = ray.init(namespace="memesh-tests", include_dashboard=False, num_cpus=2, log_to_driver=False)
    try:
        yield str(context.address_info["gcs_address"])
    finally:
        ray.shutdown()
