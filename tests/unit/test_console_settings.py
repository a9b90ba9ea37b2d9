"""Settings of the operator console: the OIDC provider, TLS, and what production refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from cluster.serve import console_config
from cluster.settings import Settings

OIDC = {"oidc_issuer": "https://idp.example", "oidc_client_id": "memesh-console"}
TLS = {"tls_certfile": "/etc/memesh/cert.pem", "tls_keyfile": "/etc/memesh/key.pem"}


@pytest.fixture(autouse=True)
def _no_config_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MEMESH_CONFIG", raising=False)


def test_defaults() -> None:
    admin = Settings().admin
    assert admin.console_enabled is False and admin.oidc_issuer is None and admin.oidc_client_secret is None
    assert admin.session_ttl_s == 8 * 3600 and admin.state_ttl_s == 600
    assert admin.public_url is None
    assert Settings().server.tls_certfile is None and not Settings().server.tls
    assert console_config(Settings()) is None


def test_the_console_needs_an_issuer_and_a_client_id() -> None:
    with pytest.raises(ValidationError, match="oidc_issuer"):
        Settings(admin={"console_enabled": True})
    with pytest.raises(ValidationError, match="oidc_client_id"):
        Settings(admin={"console_enabled": True, "oidc_issuer": "https://idp.example"})
    with pytest.raises(ValidationError, match="http"):
        Settings(admin={"oidc_issuer": "idp.example"})
    assert Settings(admin={"console_enabled": True, **OIDC}).admin.console_enabled


def test_the_client_secret_is_kept_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMESH_ADMIN__CONSOLE_ENABLED", "true")
    monkeypatch.setenv("MEMESH_ADMIN__OIDC_ISSUER", "http://127.0.0.1:9000")
    monkeypatch.setenv("MEMESH_ADMIN__OIDC_CLIENT_ID", "memesh-console")
    monkeypatch.setenv("MEMESH_ADMIN__OIDC_CLIENT_SECRET", "hunter2-secret")
    monkeypatch.setenv("MEMESH_ADMIN__BOOTSTRAP_OIDC_SUBJECT", "root-operator")
    settings = Settings()
    assert "hunter2-secret" not in repr(settings) and "hunter2-secret" not in str(settings.model_dump())
    config = console_config(settings)
    assert config is not None and config.client_secret == "hunter2-secret"
    assert "hunter2-secret" not in repr(config)
    assert (config.issuer, config.client_id, config.session_ttl_s) == ("http://127.0.0.1:9000", "memesh-console", 8 * 3600)
    assert settings.admin.bootstrap_oidc_subject == "root-operator"


def test_tls_files_go_together() -> None:
    with pytest.raises(ValidationError, match="tls_keyfile"):
        Settings(server={"tls_certfile": "/etc/memesh/cert.pem"})
    assert Settings(server=TLS).server.tls


def test_production_refuses_the_console_over_plaintext() -> None:
    with pytest.raises(ValidationError, match="plaintext"):
        Settings(profile="production", admin={"console_enabled": True, **OIDC})
    with pytest.raises(ValidationError, match="https"):
        Settings(profile="production", server=TLS, admin={"console_enabled": True, **OIDC, "oidc_issuer": "http://idp.example"})
    assert Settings(profile="production", server=TLS, admin={"console_enabled": True, **OIDC}).admin.console_enabled
    assert not Settings(profile="production").admin.console_enabled  # no console: no TLS needed
