"""Agent descriptors: parsing the accepted formats, the PUT body, and A2A card signatures (A2A spec 8.4).

No Ray, no network: real joserfc keys sign real cards; the interoperability
test signs with the reference SDK (a2a-sdk) when it is installed.
"""

from __future__ import annotations

import base64
import copy
import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from joserfc import jws
from joserfc.jwk import ECKey, OKPKey, RSAKey

from head import card_signing
from head.card_signing import (
    MAX_CHECKS,
    MAX_JWKS_KEYS,
    MAX_SIGNATURES,
    canonical_bytes,
    document_digest,
    signing_payload,
    verify_card_signatures,
    verify_import_signatures,
)
from mesh.descriptor import (
    CardShape,
    Descriptor,
    DescriptorFormat,
    Interface,
    Provider,
    SignatureCheck,
    Skill,
    descriptor_from_manual,
    import_origin,
)
from mesh.descriptor_import import is_same_import, parse_a2a_card, parse_acp_document, parse_import
from mesh.descriptor_limits import MAX_DEPTH, MAX_DOCUMENT_BYTES, MAX_SKILLS
from mesh.errors import ValidationFailed

FIXTURES = Path(__file__).parent / "fixtures" / "descriptors"
AT = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def sign_card(
    card: dict[str, Any], key: ECKey | OKPKey | RSAKey, alg: str, kid: str, payload: bytes | None = None
) -> dict[str, Any]:
    """A copy of ``card`` with one more signature, made as A2A 8.4 says.

    Protected header {alg, kid, typ: "JOSE"}; the payload is detached and by
    default :func:`signing_payload` (the card without ``signatures``, empty
    values dropped, JCS). Its agreement with the reference SDK is pinned by the
    interoperability test below, which builds the payload independently.
    """
    payload = signing_payload(card) if payload is None else payload
    compact = jws.serialize_compact({"alg": alg, "kid": kid, "typ": "JOSE"}, payload, key, algorithms=[alg])
    protected, _, signature = compact.split(".")
    return {**card, "signatures": [*card.get("signatures", []), {"protected": protected, "signature": signature}]}


def jwks_of(*keys: tuple[ECKey | OKPKey | RSAKey, str]) -> dict[str, Any]:
    return {"keys": [{**key.as_dict(private=False), "kid": kid} for key, kid in keys]}


@pytest.fixture(scope="module")
def ec_key() -> ECKey:
    return ECKey.generate_key("P-256")


@pytest.fixture(scope="module")
def ed_key() -> OKPKey:
    return OKPKey.generate_key("Ed25519")


@pytest.fixture(scope="module")
def rsa_key() -> RSAKey:
    return RSAKey.generate_key(2048)


# -- A2A cards -----------------------------------------------------------------------------------


def test_a_v1_card_becomes_a_descriptor() -> None:
    descriptor, shape = parse_a2a_card(fixture("a2a_v1_card"))
    assert shape is CardShape.A2A_V1
    assert descriptor.name == "Recipe Planner"
    assert descriptor.version == "2.4.1"
    assert descriptor.interfaces == (
        Interface("https://planner.example.com/a2a/v1", "JSONRPC", "1.0"),
        Interface("https://planner.example.com/a2a/rest", "HTTP+JSON", "1.0"),
    )
    assert descriptor.skills[0] == Skill("plan-week", "Plan a week", "Builds a seven-day menu.", ("menu", "planning"))
    assert descriptor.capabilities == {"streaming": True, "push_notifications": False}
    assert descriptor.provider == Provider("Example Foods", "https://example.com")
    assert descriptor.documentation_url == "https://docs.example.com/planner"
    assert descriptor.default_input_modes == ("text/plain", "application/json")
    assert descriptor.origin is None


def test_a_v03_card_becomes_a_descriptor_with_its_interfaces_folded() -> None:
    descriptor, shape = parse_a2a_card(fixture("a2a_v03_card"))
    assert shape is CardShape.A2A_V03
    # The main url, then the additional ones; the repeated main url appears once.
    assert descriptor.interfaces == (
        Interface("https://fx.example.org/a2a", "JSONRPC", "0.3.0"),
        Interface("https://fx.example.org/grpc", "GRPC", "0.3.0"),
    )
    assert descriptor.capabilities == {
        "streaming": False,
        "push_notifications": True,
        "state_transition_history": True,
        "extended_agent_card": True,
    }


def test_v03_defaults_apply_only_where_its_schema_has_them() -> None:
    card = fixture("a2a_v03_card")
    for key in ("protocolVersion", "preferredTransport", "additionalInterfaces"):
        del card[key]
    card["skills"] = []  # v0.3 sets no minimum
    descriptor, _ = parse_a2a_card(card)
    assert descriptor.interfaces == (Interface("https://fx.example.org/a2a", "JSONRPC", "0.3.0"),)
    assert descriptor.skills == ()


def test_shape_detection() -> None:
    both = {**fixture("a2a_v1_card"), "url": "https://legacy.example.com/a2a", "preferredTransport": "GRPC"}
    descriptor, shape = parse_a2a_card(both)
    assert shape is CardShape.A2A_V1
    assert descriptor.interfaces[0].url == "https://planner.example.com/a2a/v1"
    neither = {k: v for k, v in fixture("a2a_v1_card").items() if k != "supportedInterfaces"}
    with pytest.raises(ValidationFailed, match="neither"):
        parse_a2a_card(neither)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["name"], None, "name is required"),
        (["description"], None, "description is required"),
        (["version"], None, "version is required"),
        (["capabilities"], None, "capabilities is required"),
        (["skills"], None, "skills is required"),
        (["defaultInputModes"], None, "defaultInputModes is required"),
        (["name"], 7, "name must be a string"),
        (["name"], "", "name must be 1 to 128"),
        (["name"], "n" * 129, "name must be 1 to 128"),
        (["skills"], [], "skills must not be empty"),
        (["skills"], "plan-week", "skills must be an array"),
        (["skills", 0, "tags"], [], "tags must not be empty"),
        (["skills", 0, "tags"], ["ok", 3], "array of strings"),
        (["skills", 0, "id"], None, "id is required"),
        (["skills", 0, "examples"], "one", "examples must be an array"),
        (["defaultOutputModes"], [], "must not be empty"),
        (["supportedInterfaces"], [], "must not be empty"),
        (["supportedInterfaces", 0, "protocolVersion"], None, "protocolVersion is required"),
        (["supportedInterfaces", 0, "url"], "ftp://planner.example.com/a2a", "http or https"),
        (["supportedInterfaces", 0, "url"], "https://", "http or https"),
        (["capabilities", "streaming"], "yes", "must be a boolean"),
        (["capabilities"], [], "capabilities must be an object"),
        (["provider", "url"], None, "url is required"),
        (["documentationUrl"], "javascript:alert(1)", "http or https"),
        (
            ["skills"],
            [{"id": f"s{i}", "name": "S", "description": "", "tags": ["t"]} for i in range(MAX_SKILLS + 1)],
            "more than 64",
        ),
    ],
)
def test_invalid_v1_cards_are_refused(path: list[Any], value: Any, message: str) -> None:
    card = fixture("a2a_v1_card")
    parent = card
    for step in path[:-1]:
        parent = parent[step]
    if value is None:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    with pytest.raises(ValidationFailed, match=message):
        parse_a2a_card(card)


def test_invalid_v03_cards_are_refused() -> None:
    card = fixture("a2a_v03_card")
    card["additionalInterfaces"] = [{"url": "https://fx.example.org/x"}]
    with pytest.raises(ValidationFailed, match="transport is required"):
        parse_a2a_card(card)
    with pytest.raises(ValidationFailed, match="must be a boolean"):
        parse_a2a_card({**fixture("a2a_v03_card"), "supportsAuthenticatedExtendedCard": "true"})
    with pytest.raises(ValidationFailed, match="card must be an object"):
        parse_a2a_card([fixture("a2a_v03_card")])


# -- ACP documents -------------------------------------------------------------------------------


def test_an_acp_agent_manifest_becomes_a_descriptor() -> None:
    descriptor, shape = parse_acp_document(fixture("acp_manifest"))
    assert shape is CardShape.ACP_MANIFEST
    assert descriptor.name == "chat-summarizer"
    assert descriptor.version == ""
    assert descriptor.interfaces == ()
    assert [s.id for s in descriptor.skills] == ["Summarize", "Extract actions"]
    assert descriptor.skills[1].description == "Lists action items with owners."
    assert descriptor.provider == Provider("Example Labs", "https://example.net")
    assert descriptor.documentation_url == "https://example.net/docs/chat-summarizer"
    assert descriptor.default_input_modes == ("text/plain", "application/json")
    assert descriptor.default_output_modes == ("text/markdown",)


def test_an_agntcy_descriptor_becomes_a_descriptor() -> None:
    descriptor, shape = parse_acp_document(fixture("agntcy_descriptor"))
    assert shape is CardShape.AGNTCY_ACP
    assert descriptor.name == "org.agntcy.mailcomposer"
    assert descriptor.version == "0.0.1"
    assert descriptor.description.startswith("Collects user intent")
    assert descriptor.capabilities == {"threads": True, "interrupts": True, "callbacks": False, "streaming": True}
    assert descriptor.documentation_url is not None and descriptor.documentation_url.startswith("https://github.com/agntcy/")


def test_invalid_acp_documents_are_refused() -> None:
    with pytest.raises(ValidationFailed, match="neither an ACP AgentManifest"):
        parse_acp_document({"title": "x"})
    manifest = fixture("acp_manifest")
    del manifest["description"]
    with pytest.raises(ValidationFailed, match="description is required"):
        parse_acp_document(manifest)
    with pytest.raises(ValidationFailed, match="input_content_types must be an array"):
        parse_acp_document({**fixture("acp_manifest"), "input_content_types": "text/plain"})
    agntcy = fixture("agntcy_descriptor")
    del agntcy["metadata"]["ref"]["version"]
    with pytest.raises(ValidationFailed, match="version is required"):
        parse_acp_document(agntcy)
    agntcy = fixture("agntcy_descriptor")
    del agntcy["specs"]
    with pytest.raises(ValidationFailed, match="specs is required"):
        parse_acp_document(agntcy)


def test_parse_import_dispatches_on_format_and_enforces_the_size_and_depth_limits() -> None:
    assert parse_import("a2a", fixture("a2a_v1_card"), canonical_size=2000)[1] is CardShape.A2A_V1
    assert parse_import("acp", fixture("agntcy_descriptor"), canonical_size=2000)[1] is CardShape.AGNTCY_ACP
    with pytest.raises(ValidationFailed, match="format"):
        parse_import("openapi", {}, canonical_size=2)
    with pytest.raises(ValidationFailed, match="exceeds"):
        parse_import("a2a", fixture("a2a_v1_card"), canonical_size=MAX_DOCUMENT_BYTES + 1)
    deep: Any = "bottom"
    for _ in range(5000):  # deeper than Python's recursion limit: refused without recursing
        deep = {"x": deep}
    with pytest.raises(ValidationFailed, match="deeper"):
        parse_import("a2a", {**fixture("a2a_v1_card"), "x": deep}, canonical_size=100)
    with pytest.raises(ValidationFailed, match="deeper"):
        canonical_bytes(deep)
    shallow: Any = {}
    for _ in range(MAX_DEPTH - 1):
        shallow = {"x": shallow}
    canonical_bytes(shallow)


# -- the stored form and the PUT body -------------------------------------------------------------


def test_the_wire_form_round_trips_with_its_origin() -> None:
    descriptor, shape = parse_a2a_card(fixture("a2a_v1_card"))
    origin = import_origin(DescriptorFormat.A2A, shape, "catalog", "ab" * 32, SignatureCheck(True, "k1", "ES256"), AT)
    stored = Descriptor.from_json(json.loads(json.dumps(replace(descriptor, origin=origin).to_json())))
    assert stored.origin == origin
    assert stored == replace(descriptor, origin=origin)
    assert stored.to_json()["origin"] == {
        "format": "a2a",
        "card_shape": "a2a-v1",
        "provider": "catalog",
        "document_sha256": "ab" * 32,
        "signature": {"verified": True, "kid": "k1", "alg": "ES256"},
        "imported_at": "2026-05-01T12:00:00+00:00",
    }
    for name in ("a2a_v03_card", "acp_manifest", "agntcy_descriptor"):
        parsed = parse_a2a_card(fixture(name))[0] if name.startswith("a2a") else parse_acp_document(fixture(name))[0]
        assert Descriptor.from_json(parsed.to_json()) == parsed


def test_a_put_body_is_the_wire_form_without_origin() -> None:
    body = {
        "name": "Hand-written",
        "skills": [{"id": "s1", "name": "Skill one", "tags": ["x"]}],
        "capabilities": {"streaming": True},
        "provider": {"organization": "Us"},
        "interfaces": [{"url": "http://10.0.0.5:8080/a2a", "protocol_binding": "JSONRPC", "protocol_version": "1.0"}],
    }
    descriptor = descriptor_from_manual(body)
    assert descriptor.description == "" and descriptor.version == "" and descriptor.default_input_modes == ()
    assert descriptor.skills == (Skill("s1", "Skill one", "", ("x",)),)
    assert descriptor.provider == Provider("Us", None)
    assert descriptor_from_manual({"name": "Only a name"}).to_json()["skills"] == []
    assert descriptor_from_manual(_without_origin(descriptor)) == descriptor


def _without_origin(d: Descriptor) -> dict[str, Any]:
    wire = d.to_json()
    del wire["origin"]
    return wire


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "name is required"),
        ({"name": ""}, "name must be 1 to 128"),
        ({"name": "x", "origin": None}, "origin is set by the server"),
        ({"name": "x", "supportedInterfaces": []}, "unknown descriptor field 'supportedInterfaces'"),
        ({"name": "x", "capabilities": {"streaming": "yes"}}, "must be a boolean"),
        ({"name": "x", "skills": [{"id": "s"}]}, "name is required"),
        ({"name": "x", "skills": [{"id": "s", "name": "n"}] * (MAX_SKILLS + 1)}, "more than 64"),
        ({"name": "x", "description": "d" * 5000}, "description must be 0 to 4096"),
        ({"name": "x", "documentation_url": "file:///etc/passwd"}, "http or https"),
        ({"name": "x", "provider": {"organization": "o", "url": "gopher://o"}}, "http or https"),
        ({"name": "x", "default_input_modes": "text/plain"}, "must be an array"),
        ("not an object", "descriptor must be an object"),
    ],
)
def test_invalid_put_bodies_are_refused(body: Any, message: str) -> None:
    with pytest.raises(ValidationFailed, match=message):
        descriptor_from_manual(body)


def test_the_import_provider_label_is_bounded() -> None:
    with pytest.raises(ValidationFailed, match="provider"):
        import_origin(DescriptorFormat.A2A, CardShape.A2A_V1, "p" * 129, "0" * 64, None, AT)
    with pytest.raises(ValidationFailed, match="provider"):
        import_origin(DescriptorFormat.A2A, CardShape.A2A_V1, 5, "0" * 64, None, AT)


def test_a_reimport_of_the_same_canonical_document_is_recognised() -> None:
    card = fixture("a2a_v1_card")
    reordered = dict(reversed(list(card.items())))
    digest = document_digest(card)
    assert document_digest(reordered) == digest
    descriptor, shape = parse_a2a_card(card)
    stored = replace(descriptor, origin=import_origin(DescriptorFormat.A2A, shape, None, digest, None, AT))
    assert is_same_import(stored, document_digest(reordered))
    assert not is_same_import(stored, document_digest({**card, "version": "2.4.2"}))
    assert not is_same_import(None, digest)
    manual = replace(descriptor, origin=import_origin(DescriptorFormat.MANUAL, CardShape.MANUAL, None, digest, None, AT))
    assert not is_same_import(manual, digest)


# -- signatures ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("alg", "key_name"),
    [
        ("ES256", "ec_key"),
        ("Ed25519", "ed_key"),
        pytest.param("EdDSA", "ed_key", marks=pytest.mark.filterwarnings("ignore:EdDSA is deprecated")),
        ("RS256", "rsa_key"),
        ("PS256", "rsa_key"),
    ],
)
def test_a_signed_card_verifies_against_its_jwks(alg: str, key_name: str, request: pytest.FixtureRequest) -> None:
    key = request.getfixturevalue(key_name)
    card = sign_card(fixture("a2a_v1_card"), key, alg, "k1")
    assert verify_card_signatures(card, jwks_of((key, "k1"))) == SignatureCheck(verified=True, kid="k1", alg=alg)


def test_a_v03_card_is_verified_as_sent(ec_key: ECKey) -> None:
    card = sign_card(fixture("a2a_v03_card"), ec_key, "ES256", "k1")
    assert verify_card_signatures(card, jwks_of((ec_key, "k1"))) is not None


def test_a_card_signed_verbatim_verifies_too(ec_key: ECKey) -> None:
    card = fixture("a2a_v1_card")  # holds empty values (scopes: []) that the A2A payload drops
    assert signing_payload(card) != rfc8785.dumps(card)
    signed = sign_card(card, ec_key, "ES256", "k1", payload=rfc8785.dumps(card))
    assert verify_card_signatures(signed, jwks_of((ec_key, "k1"))) is not None
    signed["signatures"][0]["signature"] = sign_card(card, ec_key, "ES256", "k1", payload=b"{}")["signatures"][0]["signature"]
    with pytest.raises(ValidationFailed):
        verify_card_signatures(signed, jwks_of((ec_key, "k1")))


def test_an_unsigned_card_has_nothing_to_check() -> None:
    assert verify_card_signatures(fixture("a2a_v1_card"), None) is None
    assert verify_card_signatures({**fixture("a2a_v1_card"), "signatures": []}, {"keys": []}) is None


def test_a_tampered_card_is_refused(ec_key: ECKey) -> None:
    card = sign_card(fixture("a2a_v1_card"), ec_key, "ES256", "k1")
    card["skills"][0]["description"] = "Also orders groceries on your card."
    with pytest.raises(ValidationFailed, match="no card signature verifies"):
        verify_card_signatures(card, jwks_of((ec_key, "k1")))


def test_a_wrong_kid_or_another_key_under_the_same_kid_is_refused(ec_key: ECKey) -> None:
    card = sign_card(fixture("a2a_v1_card"), ec_key, "ES256", "k1")
    with pytest.raises(ValidationFailed, match="no card signature verifies"):
        verify_card_signatures(card, jwks_of((ec_key, "k2")))
    impostor = ECKey.generate_key("P-256")
    with pytest.raises(ValidationFailed, match="no card signature verifies"):
        verify_card_signatures(card, jwks_of((impostor, "k1")))


def test_any_one_verifying_signature_is_enough(ec_key: ECKey, ed_key: OKPKey) -> None:
    retired = ECKey.generate_key("P-256")
    card = sign_card(sign_card(fixture("a2a_v1_card"), retired, "ES256", "old"), ed_key, "Ed25519", "new")
    assert verify_card_signatures(card, jwks_of((ed_key, "new"))) == SignatureCheck(True, "new", "Ed25519")
    card["signatures"].insert(0, {"protected": "!!!", "signature": "x"})
    assert verify_card_signatures(card, jwks_of((ed_key, "new"))) is not None


def test_an_import_checks_a2a_signatures_and_refuses_a_jwks_for_acp(ec_key: ECKey) -> None:
    card = sign_card(fixture("a2a_v1_card"), ec_key, "ES256", "k1")
    assert verify_import_signatures("a2a", card, jwks_of((ec_key, "k1"))) == SignatureCheck(True, "k1", "ES256")
    assert verify_import_signatures("acp", fixture("acp_manifest"), None) is None
    with pytest.raises(ValidationFailed, match="only to A2A"):
        verify_import_signatures("acp", fixture("acp_manifest"), jwks_of((ec_key, "k1")))


def test_a_signed_card_without_a_jwks_is_refused(ec_key: ECKey) -> None:
    card = sign_card(fixture("a2a_v1_card"), ec_key, "ES256", "k1")
    with pytest.raises(ValidationFailed, match="signed card needs verification_jwks"):
        verify_card_signatures(card, None)


@pytest.mark.parametrize(
    "jwks",
    [
        {},
        {"keys": []},
        {"keys": "k1"},
        [],
        {"keys": [{"kty": "EC", "kid": "k1", "crv": "P-256", "x": "not-base64!", "y": "??"}]},
        {"keys": [{"kty": "oct", "kid": "k1", "k": "c2VjcmV0"}]},
        {"keys": [{"kty": "RSA", "kid": "k1"}]},
        {"keys": [7]},
    ],
)
def test_a_malformed_jwks_is_a_validation_error(jwks: Any, ec_key: ECKey) -> None:
    card = sign_card(fixture("a2a_v1_card"), ec_key, "ES256", "k1")
    with pytest.raises(ValidationFailed, match="verification_jwks"):
        verify_card_signatures(card, jwks)


def test_a_jwks_with_private_key_material_is_refused(ec_key: ECKey) -> None:
    card = sign_card(fixture("a2a_v1_card"), ec_key, "ES256", "k1")
    with pytest.raises(ValidationFailed, match="only public"):
        verify_card_signatures(card, {"keys": [{**ec_key.as_dict(private=True), "kid": "k1"}]})


def test_alg_none_and_other_algorithms_off_the_list_are_refused(ec_key: ECKey) -> None:
    card = fixture("a2a_v1_card")
    none_header = b64url(json.dumps({"alg": "none", "kid": "k1", "typ": "JOSE"}).encode())
    with pytest.raises(ValidationFailed, match="no card signature verifies"):
        verify_card_signatures({**card, "signatures": [{"protected": none_header, "signature": ""}]}, jwks_of((ec_key, "k1")))
    es512 = ECKey.generate_key("P-521")
    signed = sign_card(card, es512, "ES512", "k1")
    with pytest.raises(ValidationFailed, match="no card signature verifies"):
        verify_card_signatures(signed, jwks_of((es512, "k1")))


def test_a_protected_header_must_name_its_kid_and_type(ec_key: ECKey) -> None:
    card = fixture("a2a_v1_card")
    unsigned = signing_payload(card)
    for header in ({"alg": "ES256"}, {"alg": "ES256", "kid": "k1", "typ": "JWT"}):
        compact = jws.serialize_compact(header, unsigned, ec_key, algorithms=["ES256"])
        protected, _, signature = compact.split(".")
        with pytest.raises(ValidationFailed, match="no card signature verifies"):
            verify_card_signatures(
                {**card, "signatures": [{"protected": protected, "signature": signature}]}, jwks_of((ec_key, "k1"))
            )


def test_the_signing_payload_drops_empty_values_and_signatures() -> None:
    card = {**fixture("a2a_v03_card"), "iconUrl": "", "skills": [{"id": "s", "name": "S", "tags": [], "examples": [""]}]}
    card["signatures"] = [{"protected": "x", "signature": "y"}]
    payload = json.loads(signing_payload(card))
    assert "signatures" not in payload and "iconUrl" not in payload
    assert payload["skills"] == [{"id": "s", "name": "S"}]
    assert payload["capabilities"]["streaming"] is False  # false is a value, not an empty one


def test_the_v1_signing_payload_ignores_fields_outside_the_v1_card() -> None:
    card = fixture("a2a_v1_card")
    served = copy.deepcopy(card)
    served |= {"url": "https://planner.example.com/a2a/v1", "preferredTransport": "JSONRPC", "security": [{"key": []}]}
    served["securitySchemes"]["key"] |= {"type": "apiKey", "in": "header", "name": "x-service-key"}
    served["skills"][0]["security"] = [{"key": []}]
    assert signing_payload(served) == signing_payload(card)
    assert b'"required"' not in signing_payload(card)  # proto-default false: the SDK never signs it


# -- interoperability with the reference SDK -------------------------------------------------------


def test_cards_signed_by_a2a_sdk_verify_and_ours_verify_in_a2a_sdk(ec_key: ECKey) -> None:
    from a2a.client.card_resolver import parse_agent_card
    from a2a.server.request_handlers.response_helpers import agent_card_to_dict
    from a2a.types import AgentCard
    from a2a.utils import signing  # a dev dependency: this test never skips
    from google.protobuf.json_format import MessageToDict, ParseDict

    source = fixture("a2a_v1_card")
    source["skills"][1]["description"] = "Turns a menu into a shopping list: crème fraîche, jalapeño 🌶."
    # A 0.3 interface makes the SDK's server add the legacy top-level fields to the card it serves.
    source["supportedInterfaces"].append(
        {"url": "https://planner.example.com/a2a/v03", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}
    )
    pem = ec_key.as_pem(private=True)
    signer = signing.create_agent_card_signer(signing_key=pem, protected_header={"alg": "ES256", "kid": "sdk-1", "typ": "JOSE"})
    signed = signer(ParseDict(source, AgentCard()))
    jwks = jwks_of((ec_key, "sdk-1"))
    for form in (MessageToDict(signed), agent_card_to_dict(signed)):
        assert verify_card_signatures(form, jwks) == SignatureCheck(True, "sdk-1", "ES256")
    served = agent_card_to_dict(signed)
    assert "url" in served and "preferredTransport" in served
    tampered = copy.deepcopy(served)
    tampered["skills"][0]["tags"].append("injected")
    with pytest.raises(ValidationFailed):
        verify_card_signatures(tampered, jwks)

    ours = sign_card(fixture("a2a_v1_card"), ec_key, "ES256", "ours")
    public_pem = ec_key.as_pem(private=False)
    verifier = signing.create_signature_verifier(lambda kid, jku: public_pem, ["ES256"])
    verifier(parse_agent_card(copy.deepcopy(ours)))  # raises when no signature verifies


@pytest.mark.filterwarnings("ignore:Key size should be")  # joserfc's warning for the short key refused here
def test_rsa_keys_that_make_a_check_costly_are_refused(rsa_key: RSAKey) -> None:
    """A 3071-bit public exponent made one RSA check cost 7.8 ms on the shared event loop: the moduli and
    exponents taken are bounded before any check runs."""
    card = sign_card(fixture("a2a_v1_card"), rsa_key, "RS256", "k1")
    public = jwks_of((rsa_key, "k1"))["keys"][0]
    n = int.from_bytes(base64.urlsafe_b64decode(public["n"] + "=="), "big")
    costly = {**public, "e": b64url(((1 << 2000) | 1).to_bytes(251, "big"))}
    with pytest.raises(ValidationFailed, match="public exponent"):
        verify_card_signatures(card, {"keys": [costly]})
    short = {**public, "n": b64url((n >> 1100).to_bytes(120, "big"))}
    with pytest.raises(ValidationFailed, match="bit moduli"):
        verify_card_signatures(card, {"keys": [short]})
    assert verify_card_signatures(card, jwks_of((rsa_key, "k1"))) is not None  # e = 65537, 2048 bits


def test_an_import_costs_at_most_max_checks_signature_checks(ec_key: ECKey, monkeypatch: pytest.MonkeyPatch) -> None:
    """8 signatures, two payload shapes and 32 keys under one kid were 512 checks; at most MAX_CHECKS are made."""
    impostors = [(ECKey.generate_key("P-256"), "k1") for _ in range(MAX_JWKS_KEYS - 1)]
    card = fixture("a2a_v1_card")
    for _ in range(MAX_SIGNATURES - 1):
        card = sign_card(card, ECKey.generate_key("P-256"), "ES256", "k1")
    card = sign_card(card, ec_key, "ES256", "k1")  # the one that verifies comes last, its key last
    checks = []
    real = card_signing.jws.deserialize_compact
    monkeypatch.setattr(card_signing.jws, "deserialize_compact", lambda *a, **kw: checks.append(1) or real(*a, **kw))
    with pytest.raises(ValidationFailed, match=f"within {MAX_CHECKS} checks"):
        verify_card_signatures(card, jwks_of(*impostors, (ec_key, "k1")))
    assert len(checks) == MAX_CHECKS
    checks.clear()
    assert verify_card_signatures(card, jwks_of((ec_key, "k1"))) is not None  # one key a kid: 8 signatures, 2 shapes
    assert len(checks) <= MAX_CHECKS
