"""The gRPC data plane's settings: its own listener, TLS with REST's certificate, reflection by profile,
and the production profile's rule (the data plane is treated as REST is; only the admin service needs TLS)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from cluster.serve import data_plane_config
from cluster.settings import Settings


@pytest.fixture(autouse=True)
def _no_config_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # a stray ./memesh.toml must not change the defaults


def test_the_data_plane_has_a_listener_of_its_own_facing_agents() -> None:
    settings = Settings()
    config = data_plane_config(settings)
    assert config is not None
    assert (config.host, config.port) == ("0.0.0.0", 50052)  # REST's exposure; the admin one stays 127.0.0.1:50051
    assert (settings.server.grpc_host, settings.server.grpc_port) == ("127.0.0.1", 50051)
    assert not config.tls and config.reflection  # dev: reflection on
    assert config.max_message_bytes == settings.server.max_body_bytes
    assert config.max_concurrent_rpcs > settings.limits.max_inbox_streams
    assert data_plane_config(Settings(server={"grpc_data_enabled": False})) is None


def test_tls_is_rests_certificate() -> None:
    pem = Path("/etc/memesh/cert.pem")
    config = data_plane_config(Settings(server={"tls_certfile": pem, "tls_keyfile": pem}))
    assert config is not None and config.tls and config.certfile == pem


def test_production_treats_the_data_plane_as_rest_and_only_the_admin_service_needs_tls() -> None:
    settings = Settings(profile="production")  # plaintext beyond loopback, as REST: TLS here or at a proxy in front
    assert settings.server.grpc_data_enabled and not settings.server.grpc_data_loopback
    with pytest.raises(ValidationError, match="gRPC admin service in plaintext"):
        Settings(profile="production", server={"grpc_host": "0.0.0.0"})
    assert Settings(profile="production", server={"grpc_data_host": "::1"}).server.grpc_data_loopback


def test_reflection_is_on_in_dev_and_a_setting_in_production() -> None:
    local: dict[str, str] = {}
    assert Settings().grpc_reflection_enabled
    assert not Settings(server={"grpc_reflection": False}).grpc_reflection_enabled
    assert not Settings(profile="production", server=local).grpc_reflection_enabled
    assert Settings(profile="production", server={**local, "grpc_reflection": True}).grpc_reflection_enabled
