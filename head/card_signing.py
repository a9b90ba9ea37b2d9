"""Canonical JSON of imported documents and A2A agent-card signature checks (A2A spec 8.4).

Guarantees of :func:`verify_card_signatures`:
- fail-closed: a card that carries signatures is accepted only when one of them
  verifies against the JWKS supplied with the import; no JWKS, a malformed
  JWKS, an unknown ``kid``, a disallowed ``alg`` or a bad signature each raise
  :class:`~mesh.errors.ValidationFailed` (never a 500);
- keys come only from the supplied JWKS, matched by ``kid``. ``jku`` is never
  fetched: the control plane makes no outbound requests;
- only :data:`ALLOWED_ALGORITHMS` are accepted (never ``none`` or HMAC).
- bounded: at most :data:`MAX_CHECKS` signature checks an import, and RSA keys of
  :data:`RSA_BITS` with a public exponent of at most :data:`RSA_MAX_EXPONENT`
  (the checks run on the event loop every request shares: 512 checks with
  3071-bit exponents held it for 3.5 s).

The payload rebuilt for verification (:func:`signing_payload`) is the one the
reference SDK (``a2a-sdk`` 1.x) signs, so SDK-signed cards verify; see its
docstring for the two shapes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from typing import Any, cast

import rfc8785
from cryptography.hazmat.primitives.asymmetric import rsa
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, KeySet, OKPKey, RSAKey

from mesh.descriptor import DescriptorFormat, SignatureCheck
from mesh.descriptor_limits import check_depth
from mesh.errors import ValidationFailed

ALLOWED_ALGORITHMS = ("ES256", "ES384", "RS256", "PS256", "Ed25519", "EdDSA")
MAX_SIGNATURES = 8
MAX_JWKS_KEYS = 32
MAX_CHECKS = 16  # signature checks one import may cost (a signature, a payload shape, a key of its kid)
RSA_BITS = (2048, 4096)  # the moduli taken: a verification's cost grows with the modulus and the exponent
RSA_MAX_EXPONENT = 2**32 - 1  # 65537 is what signers use; a 3071-bit exponent made one check cost 7.8 ms
_PROTECTED_MAX = 2048  # characters of the base64url protected header
_PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})

PublicKey = ECKey | OKPKey | RSAKey


def canonical_bytes(doc: object) -> bytes:
    """The RFC 8785 (JCS) form of a parsed JSON document; too-deep or non-canonicalisable input is a ValidationFailed."""
    check_depth(doc)
    try:
        return rfc8785.dumps(cast(Any, doc))
    except (rfc8785.CanonicalizationError, TypeError, ValueError):
        raise ValidationFailed("document has no RFC 8785 canonical form (integers beyond 2^53, NaN, non-string keys)") from None


def document_digest(doc: object) -> str:
    """SHA-256 hex of :func:`canonical_bytes`: the identity of an imported document."""
    return hashlib.sha256(canonical_bytes(doc)).hexdigest()


# -- the signed payload ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _MapOf:
    """A JSON object whose every value has ``schema`` (a protobuf map)."""

    schema: _Schema


_Schema = dict[str, "_Schema | _MapOf | None"] | _MapOf | None  # None: the value is kept as it is


def _message(*keys: str, **nested: _Schema) -> dict[str, _Schema]:
    return {**dict.fromkeys(keys), **nested}


def _flow(*keys: str) -> dict[str, _Schema]:
    return _message("refreshUrl", "scopes", *keys)


_V1_CARD = _message(
    "name",
    "description",
    "version",
    "documentationUrl",
    "iconUrl",
    "defaultInputModes",
    "defaultOutputModes",
    supportedInterfaces=_message("url", "protocolBinding", "tenant", "protocolVersion"),
    provider=_message("url", "organization"),
    capabilities=_message(
        "streaming", "pushNotifications", "extendedAgentCard", extensions=_message("uri", "description", "required", "params")
    ),
    securitySchemes=_MapOf(
        _message(
            apiKeySecurityScheme=_message("description", "location", "name"),
            httpAuthSecurityScheme=_message("description", "scheme", "bearerFormat"),
            oauth2SecurityScheme=_message(
                "description",
                "oauth2MetadataUrl",
                flows=_message(
                    authorizationCode=_flow("authorizationUrl", "tokenUrl", "pkceRequired"),
                    clientCredentials=_flow("tokenUrl"),
                    implicit=_flow("authorizationUrl"),
                    password=_flow("tokenUrl"),
                    deviceCode=_flow("deviceAuthorizationUrl", "tokenUrl"),
                ),
            ),
            openIdConnectSecurityScheme=_message("description", "openIdConnectUrl"),
            mtlsSecurityScheme=_message("description"),
        )
    ),
    securityRequirements=_message(schemes=_MapOf(_message("list"))),
    skills=_message(
        "id",
        "name",
        "description",
        "tags",
        "examples",
        "inputModes",
        "outputModes",
        securityRequirements=_message(schemes=_MapOf(_message("list"))),
    ),
)
# Booleans without presence in a2a.proto: protobuf JSON omits them when false.
_FALSE_IS_DEFAULT = frozenset({"required", "pkceRequired"})


def _project(value: Any, schema: _Schema) -> Any:
    if schema is None:
        return value
    if isinstance(value, list):
        return [_project(v, schema) for v in value]
    if not isinstance(value, dict):
        return value
    if isinstance(schema, _MapOf):
        return {k: _project(v, schema.schema) for k, v in value.items()}
    return {k: _project(v, schema[k]) for k, v in value.items() if k in schema and not (k in _FALSE_IS_DEFAULT and v is False)}


def _drop_empty(value: Any) -> Any:
    """a2a-sdk's ``_clean_empty``: None, "", [] and {} vanish recursively (false and 0 stay)."""
    if isinstance(value, dict):
        kept = {k: c for k, v in value.items() if (c := _drop_empty(v)) is not None}
        return kept or None
    if isinstance(value, list):
        items = [c for v in value if (c := _drop_empty(v)) is not None]
        return items or None
    return None if value == "" else value


def signing_payload(card: dict[str, Any]) -> bytes:
    """The JCS bytes a card's signatures cover: the card without ``signatures``, empty values dropped.

    A v1 card (one with ``supportedInterfaces``) is first reduced to the fields
    of the v1 ``AgentCard`` message, with proto-default ``false`` booleans
    dropped: that is what a2a-sdk 1.x signs (``MessageToDict`` of the proto),
    and it ignores the v0.3 compatibility fields (``url``, ``preferredTransport``,
    ``security``, ...) the SDK's server merges into the cards it serves. Those
    extra fields are therefore unsigned, and the descriptor never reads them.
    A v0.3 card is signed as sent, minus its empty values.
    """
    check_depth(card)
    body = {k: v for k, v in card.items() if k != "signatures"}
    if "supportedInterfaces" in body:
        body = _project(body, _V1_CARD)
    return canonical_bytes(_drop_empty(body) or {})


# -- verification ------------------------------------------------------------------------------------


def verify_card_signatures(card: dict[str, Any], jwks: object | None) -> SignatureCheck | None:
    """The signature that verifies ``card`` against ``jwks``; None when the card carries no signatures.

    A signature may cover :func:`signing_payload` (A2A 8.4 and a2a-sdk) or the
    card exactly as sent without ``signatures`` (signers that drop nothing);
    both are rebuilt from the received card alone. Raises ValidationFailed for
    a signed card without a JWKS, a malformed JWKS, or when no signature
    verifies (fail-closed, spec rule 4).
    """
    signatures = card.get("signatures")
    if signatures is None or signatures == []:
        return None
    if not isinstance(signatures, list) or len(signatures) > MAX_SIGNATURES:
        raise ValidationFailed(f"card.signatures must be an array of at most {MAX_SIGNATURES} signatures")
    if jwks is None:
        raise ValidationFailed("signed card needs verification_jwks")
    keys = _public_keys(jwks)
    payloads = dict.fromkeys((signing_payload(card), canonical_bytes({k: v for k, v in card.items() if k != "signatures"})))
    budget = [MAX_CHECKS]
    for entry in signatures:
        for payload in payloads:
            check = _verify_one(entry, keys, payload, budget)
            if check is not None:
                return check
    if budget[0] <= 0:
        raise ValidationFailed(f"no card signature verifies within {MAX_CHECKS} checks against verification_jwks")
    raise ValidationFailed("no card signature verifies against verification_jwks")


def verify_import_signatures(fmt: object, document: object, jwks: object | None) -> SignatureCheck | None:
    """:func:`verify_card_signatures` for an import body; a JWKS sent with a non-A2A document is refused.

    ACP documents have no signature scheme: accepting a JWKS with one would
    suggest a verification that did not happen.
    """
    if fmt != DescriptorFormat.A2A:
        if jwks is not None:
            raise ValidationFailed("verification_jwks applies only to A2A cards")
        return None
    if not isinstance(document, dict):
        raise ValidationFailed("card must be an object")
    return verify_card_signatures(document, jwks)


def _verify_one(entry: object, keys: dict[str, list[PublicKey]], payload: bytes, budget: list[int]) -> SignatureCheck | None:
    """The check of one signature over ``payload`` by the keys of its ``kid``; each key tried takes one of
    ``budget``'s checks, and none is tried once they are spent."""
    if not isinstance(entry, dict):
        return None
    protected, signature = entry.get("protected"), entry.get("signature")
    if not isinstance(protected, str) or not isinstance(signature, str) or len(protected) > _PROTECTED_MAX:
        return None
    header = _decode_header(protected)
    if header is None:
        return None
    alg, kid, typ = header.get("alg"), header.get("kid"), header.get("typ", "JOSE")
    if alg not in ALLOWED_ALGORITHMS or not isinstance(kid, str) or typ != "JOSE":
        return None
    for key in keys.get(kid, []):
        if budget[0] <= 0:
            return None
        budget[0] -= 1
        try:
            jws.deserialize_compact(f"{protected}..{signature}", key, algorithms=[alg], payload=payload)
        except (JoseError, ValueError, TypeError):
            continue
        return SignatureCheck(verified=True, kid=kid, alg=alg)
    return None


def _decode_header(protected: str) -> dict[str, Any] | None:
    try:
        header = json.loads(base64.urlsafe_b64decode(protected + "=" * (-len(protected) % 4)))
    except (binascii.Error, ValueError):  # ValueError covers UnicodeDecodeError and JSONDecodeError
        return None
    return header if isinstance(header, dict) else None


def _public_keys(jwks: object) -> dict[str, list[PublicKey]]:
    """The JWKS's public EC, OKP and RSA keys by ``kid``. Private or symmetric key material is refused."""
    raw = jwks.get("keys") if isinstance(jwks, dict) else None
    if not isinstance(raw, list) or not raw or len(raw) > MAX_JWKS_KEYS:
        raise ValidationFailed(f"verification_jwks must be a JWKS with 1 to {MAX_JWKS_KEYS} keys")
    for key in raw:
        if not isinstance(key, dict) or key.get("kty") not in ("EC", "OKP", "RSA") or _PRIVATE_MEMBERS & key.keys():
            raise ValidationFailed("verification_jwks must hold only public EC, OKP or RSA keys")
    try:
        imported = KeySet.import_key_set({"keys": raw})
    except (JoseError, ValueError, TypeError, KeyError):
        raise ValidationFailed("verification_jwks holds a key that cannot be read") from None
    by_kid: dict[str, list[PublicKey]] = {}
    for key in imported.keys:
        if isinstance(key, RSAKey):
            _check_rsa(key)
        if isinstance(key, ECKey | OKPKey | RSAKey) and key.kid:
            by_kid.setdefault(key.kid, []).append(key)
    return by_kid


def _check_rsa(key: RSAKey) -> None:
    raw = key.raw_value
    public = raw.public_key() if isinstance(raw, rsa.RSAPrivateKey) else raw  # private members were refused above
    low, high = RSA_BITS
    if not low <= public.key_size <= high:
        raise ValidationFailed(f"verification_jwks RSA keys must have {low} to {high} bit moduli")
    if public.public_numbers().e > RSA_MAX_EXPONENT:
        raise ValidationFailed(f"verification_jwks RSA keys must have a public exponent of at most {RSA_MAX_EXPONENT}")


__all__ = [
    "ALLOWED_ALGORITHMS",
    "canonical_bytes",
    "document_digest",
    "signing_payload",
    "verify_card_signatures",
    "verify_import_signatures",
]
