"""The one settings class: env, TOML, profiles."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from cluster.settings import DEFAULT_POOL_MAX, Settings


def test_defaults_match_the_spec(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    s = Settings()
    assert (s.server.host, s.server.port) == ("0.0.0.0", 8080)
    assert s.pull.max_batch == 256
    assert s.observatory.max_events == 50_000 and s.observatory.max_age_s == 600
    assert s.observatory.stream_channel_capacity == 16_384 and s.observatory.max_concurrent_streams == 16
    assert s.admin.console_enabled is False
    assert s.embedding.engine == "minilm-onnx" and s.storage.data_dir == Path("data")
    assert s.observatory_enabled is True  # dev profile


def test_the_embedder_pool_is_one_actor_per_usable_cpu_for_a_model_engine_on_ray(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    for cpus, pool, threads in ((1, 1, 1), (2, 2, 1), (3, 3, 1), (16, DEFAULT_POOL_MAX, 16 // DEFAULT_POOL_MAX)):
        monkeypatch.setattr("cluster.settings.usable_cpus", lambda cpus=cpus: cpus)
        assert (Settings().embedder_pool, Settings().embedder_threads) == (pool, threads), cpus  # minilm-onnx on Ray
        assert Settings(embedding={"engine": "minilm"}).embedder_pool == pool
        assert Settings(embedding={"pool": 1}).embedder_threads == cpus  # one copy: every usable CPU
    assert Settings(embedding={"engine": "hash"}).embedder_pool == 0  # no model: embedding in the head costs less than a hop
    assert Settings(ray={"in_process": True}).embedder_pool == 0  # no Ray: no process to move the model to
    assert Settings(ray={"in_process": True}).embedder_threads is None  # the head's own model takes every CPU
    assert Settings(embedding={"pool": 0}).embedder_pool == 0  # an operator's choice wins
    assert Settings(embedding={"engine": "hash", "pool": 3}).embedder_pool == 3
    assert Settings(embedding={"pool": 8, "threads": 3}).embedder_threads == 3
    monkeypatch.setattr("cluster.settings.usable_cpus", lambda: 2)
    assert Settings(embedding={"pool": 8}).embedder_threads == 1  # more copies than CPUs: one thread each


def test_nested_environment_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMESH_PULL__MAX_BATCH", "128")
    monkeypatch.setenv("MEMESH_RATE_LIMITS__INBOX__RATE", "5")
    monkeypatch.setenv("MEMESH_RAY__ADDRESS", "10.0.0.1:6379")
    s = Settings()
    assert s.pull.max_batch == 128
    assert s.rate_limits.inbox.rate == 5 and s.rate_limits.inbox.burst == 200  # the rest of the section keeps its default
    assert s.ray.address == "10.0.0.1:6379"


def test_toml_file_is_read_and_env_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "custom.toml"
    config.write_text('profile = "dev"\n[server]\nport = 9000\n[embedding]\nengine = "hash"\n[scenes]\njoin_similarity = 0.7\n')
    monkeypatch.setenv("MEMESH_CONFIG", str(config))
    monkeypatch.setenv("MEMESH_SERVER__PORT", "9100")
    s = Settings()
    assert s.server.port == 9100 and s.embedding.engine == "hash" and s.scenes.join_similarity == 0.7


def test_invalid_values_and_unknown_keys_are_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValidationError):
        Settings(pull={"max_batch": 0})
    with pytest.raises(ValidationError):
        Settings(server={"prot": 1})
    with pytest.raises(ValidationError):
        Settings(embedding={"engine": "word2vec"})


def test_two_listeners_on_one_port_are_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValidationError, match=r"grpc_data_port and server\.port are both 9000"):
        Settings(server={"port": 9000, "grpc_data_port": 9000})
    with pytest.raises(ValidationError, match=r"server\.grpc_port and server\.port"):
        Settings(server={"port": 9000, "grpc_port": 9000})
    # a listener that is off, or a port the kernel chooses, clashes with nothing
    assert Settings(server={"port": 9000, "grpc_data_port": 9000, "grpc_data_enabled": False}).server.port == 9000
    assert Settings(server={"port": 0, "grpc_port": 0, "grpc_data_port": 0}).server.grpc_port == 0


def test_production_refuses_unsafe_choices(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValidationError, match="minilm"):
        Settings(profile="production", embedding={"engine": "hash"})
    with pytest.raises(ValidationError, match="rate limits"):
        Settings(profile="production", rate_limits={"read": {"rate": 0}})
    s = Settings(profile="production")
    assert s.observatory_enabled is False


def test_bounds_that_could_never_be_met_are_refused_at_start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A full batch larger than a tenant's share of the embedding queue got 429 ``Retry-After: 1`` forever."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValidationError, match="max_batch_cells"):
        Settings(limits={"max_batch_cells": 2_000})
    with pytest.raises(ValidationError, match="max_queued_texts_per_tenant"):
        Settings(embedding={"max_queued_texts": 512})
    assert Settings(limits={"max_batch_cells": 1_024}).limits.max_batch_cells == 1_024


def test_the_specs_observatory_key_max_age_is_taken(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The spec's table names the key ``max_age``; memesh names it ``max_age_s`` like every duration. Both are
    taken, from the environment and from memesh.toml (``max_age`` was refused: the server did not start)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMESH_OBSERVATORY__MAX_AGE", "60")
    assert Settings().observatory.max_age_s == 60
    monkeypatch.delenv("MEMESH_OBSERVATORY__MAX_AGE")
    config = tmp_path / "memesh.toml"
    config.write_text("[observatory]\nmax_age = 90\n")
    monkeypatch.setenv("MEMESH_CONFIG", str(config))
    assert Settings().observatory.max_age_s == 90
    config.write_text("[observatory]\nmax_age_s = 120\n")
    assert Settings().observatory.max_age_s == 120
