"""The A2A agent card in process: one document both parsers read, its signature, its key, its routes.

The served card is parsed by the SDK's v1.0 parser (``parse_agent_card``) and
by its v0.3 model (``compat.v0_3.types.AgentCard``); its signature is checked
by the SDK's verifier and by memesh's own descriptor-import checker, against
the JWKS memesh publishes. ``tests/e2e/test_a2a.py`` does the same against
``memesh serve``.
"""

from __future__ import annotations

import base64
import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client.card_resolver import parse_agent_card
from a2a.compat.v0_3 import types as types_v03
from a2a.compat.v0_3.conversions import to_core_agent_card
from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier
from jwt.api_jwk import PyJWK

from api.a2a.card import A2aConfig
from api.a2a.keys import KEY_FILE, CardKey
from api.app import create_app
from head.card_signing import verify_card_signatures
from head.facade import Memesh
from mesh.errors import ValidationFailed
from tests.unit.conftest import assert_error

BASE = "http://memesh.test"
CARD = "/.well-known/agent-card.json"
KEYS = "/.well-known/memesh-card-keys.json"


def app_with_a2a(core: Memesh, data_dir: Path, base_url: str = BASE) -> Any:
    return create_app(core, a2a=A2aConfig(base_url=base_url, data_dir=data_dir))


async def served(app: Any, *paths: str) -> list[httpx.Response]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as http:
        return [await http.get(path) for path in paths]


def sdk_verifier(jwks: dict[str, Any], jku: str) -> Callable[[Any], None]:
    """The SDK's verifier, its keys taken by ``kid`` from ``jwks`` (only when the signature names ``jku``)."""

    def key_provider(kid: str | None, named_jku: str | None) -> PyJWK:
        assert named_jku == jku
        (key,) = [k for k in jwks["keys"] if k["kid"] == kid]
        return PyJWK(key)

    return create_signature_verifier(key_provider, ["ES256"])


async def test_one_card_reads_as_v1_and_as_v0_3_and_declares_both_credentials(core: Memesh, tmp_path: Path) -> None:
    app = app_with_a2a(core, tmp_path)
    (response,) = await served(app, CARD)  # no key: the card is public
    assert response.status_code == 200 and response.headers["cache-control"] == "public, max-age=300"
    raw = response.json()

    v1 = parse_agent_card(json.loads(response.text))
    assert [(i.url, i.protocol_binding, i.protocol_version) for i in v1.supported_interfaces] == [
        (f"{BASE}/a2a/v1", "JSONRPC", "1.0"),
        (f"{BASE}/a2a/v1", "JSONRPC", "0.3"),
    ]
    schemes = v1.security_schemes
    assert schemes["serviceKey"].api_key_security_scheme.name == "x-service-key"
    assert schemes["serviceKey"].api_key_security_scheme.location == "header"
    assert schemes["bearer"].http_auth_security_scheme.scheme == "bearer"
    assert [list(r.schemes) for r in v1.security_requirements] == [["serviceKey"], ["bearer"]]  # either one
    assert not v1.capabilities.streaming and not v1.capabilities.push_notifications
    assert {s.id for s in v1.skills} == {
        "memory.recall",
        "memory.query",
        "memory.write",
        "memory.session",
        "memory.beacon",
        "memory.inbox",
    }

    legacy = types_v03.AgentCard.model_validate(raw)  # what a 0.3 client reads: url, preferredTransport, security
    assert (legacy.url, legacy.preferred_transport, legacy.protocol_version) == (f"{BASE}/a2a/v1", "JSONRPC", "0.3")
    assert legacy.security == [{"serviceKey": []}, {"bearer": []}]
    assert raw["securitySchemes"]["serviceKey"]["type"] == "apiKey" and raw["securitySchemes"]["serviceKey"]["in"] == "header"
    assert raw["securitySchemes"]["bearer"]["type"] == "http"
    as_core = to_core_agent_card(legacy)
    assert [(i.url, i.protocol_version) for i in as_core.supported_interfaces] == [(f"{BASE}/a2a/v1", "0.3")]
    await app.state.a2a.close()


async def test_the_served_card_verifies_with_the_published_keys_and_a_changed_one_does_not(core: Memesh, tmp_path: Path) -> None:
    app = app_with_a2a(core, tmp_path)
    card_response, keys_response = await served(app, CARD, KEYS)
    assert keys_response.status_code == 200
    jwks, raw = keys_response.json(), card_response.json()
    assert all("d" not in key for key in jwks["keys"])
    (signature,) = raw["signatures"]
    header = json.loads(base64.urlsafe_b64decode(signature["protected"] + "=" * (-len(signature["protected"]) % 4)))
    assert header == {"alg": "ES256", "kid": jwks["keys"][0]["kid"], "jku": f"{BASE}{KEYS}", "typ": "JOSE"}

    sdk_verifier(jwks, f"{BASE}{KEYS}")(parse_agent_card(json.loads(card_response.text)))
    check = verify_card_signatures(raw, jwks)  # memesh's own checker, as on a descriptor import
    assert check is not None and check.verified and check.kid == header["kid"]

    forged = {**raw, "description": "a different agent"}
    with pytest.raises(InvalidSignaturesError):
        sdk_verifier(jwks, f"{BASE}{KEYS}")(parse_agent_card(json.loads(json.dumps(forged))))
    with pytest.raises(ValidationFailed):
        verify_card_signatures(forged, jwks)
    await app.state.a2a.close()


async def test_the_card_route_revalidates_with_its_etag(core: Memesh, tmp_path: Path) -> None:
    app = app_with_a2a(core, tmp_path)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as http:
        first = await http.get(CARD)
        again = await http.get(CARD, headers={"if-none-match": first.headers["etag"]})
    assert again.status_code == 304 and again.headers["etag"] == first.headers["etag"]
    await app.state.a2a.close()


def test_the_signing_key_is_private_and_kept_across_starts(tmp_path: Path) -> None:
    first = CardKey.load_or_create(tmp_path)
    path = tmp_path / KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "d" in json.loads(path.read_text())
    again = CardKey.load_or_create(tmp_path)
    assert again.kid == first.kid and again.jwks() == first.jwks()
    assert CardKey.load_or_create(tmp_path / "elsewhere").kid != first.kid


async def test_a_restarted_head_serves_a_card_the_old_keys_still_verify(core: Memesh, tmp_path: Path) -> None:
    first = app_with_a2a(core, tmp_path)
    before = await served(first, KEYS)
    await first.state.a2a.close()
    app = app_with_a2a(core, tmp_path)
    (card,) = await served(app, CARD)
    assert verify_card_signatures(card.json(), before[0].json()) is not None
    await app.state.a2a.close()


async def test_without_a2a_nothing_is_served_and_openapi_stays_exactly_v1(core: Memesh, tmp_path: Path) -> None:
    plain = create_app(core)
    assert plain.state.a2a is None
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=plain), base_url=BASE) as http:
        for path in (CARD, KEYS):
            assert_error(await http.get(path), 404, "not_found")
        assert_error(await http.post("/a2a/v1", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage"}), 404, "not_found")
        plain_doc = (await http.get("/openapi.json")).json()
    app = app_with_a2a(core, tmp_path)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as http:
        doc = (await http.get("/openapi.json")).json()
    assert doc == plain_doc and doc["paths"] and all(path.startswith("/v1/") for path in doc["paths"])
    await plain.state.mcp.close()
    await app.state.a2a.close()


def test_the_settings_name_the_url_the_card_advertises(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from cluster.serve import a2a_config
    from cluster.settings import Settings

    assert a2a_config(Settings()) is None  # off by default
    local = a2a_config(Settings(a2a={"enabled": True}, server={"host": "0.0.0.0", "port": 9000}))
    assert local is not None and local.rpc_url == "http://localhost:9000/a2a/v1"
    public = a2a_config(Settings(a2a={"enabled": True, "public_url": "https://memesh.example.com/"}))
    assert public is not None and public.keys_url == "https://memesh.example.com/.well-known/memesh-card-keys.json"
    with pytest.raises(ValidationError, match="http"):
        Settings(a2a={"enabled": True, "public_url": "memesh.example.com"})
    with pytest.raises(ValidationError, match=r"https a2a\.public_url"):
        Settings(profile="production", a2a={"enabled": True, "public_url": "http://memesh.example.com"})
