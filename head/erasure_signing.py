"""The service's erasure-receipt key: signs certificate digests, publishes the public half.

Guarantees:
- One Ed25519 key per head's data directory, created on first start
  (``<data_dir>/erasure-signing-key.json``, mode 0600) and reused afterwards.
  Its public half is recorded with the deployment's data (the registry's
  manifest) at every start, and the published key set holds every key ever
  recorded, so every receipt the deployment issued keeps verifying even after
  a head starts with a new key.
- A certificate's ``digest`` is a compact JWS (``alg`` Ed25519, ``kid``, ``typ``
  JOSE) whose payload is the RFC 8785 canonical JSON of the receipt claims
  (scope, label, counts, time, actor). Anyone holding the public key set
  (``GET /.well-known/memesh-erasure-keys.json``) verifies it with any JOSE
  library; the private key never leaves the head process.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import rfc8785
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import KeySet, OKPKey

from head.private_files import load_or_create_key
from mesh.errors import ValidationFailed

ALGORITHM = "Ed25519"
KEY_FILE = "erasure-signing-key.json"


class ErasureSigner:
    def __init__(self, key: OKPKey) -> None:
        self._key = key

    @classmethod
    def load_or_create(cls, data_dir: Path) -> ErasureSigner:
        """The deployment's key: read from ``data_dir``, or generated and written there (0600) once."""
        generate = partial(OKPKey.generate_key, "Ed25519", auto_kid=True)
        return cls(load_or_create_key(data_dir / KEY_FILE, generate, OKPKey.import_key, lambda k: k.as_dict(private=True)))

    @property
    def kid(self) -> str:
        return str(self._key.kid)

    def sign(self, claims: dict[str, Any]) -> str:
        header = {"alg": ALGORITHM, "kid": self.kid, "typ": "JOSE"}
        return jws.serialize_compact(header, rfc8785.dumps(claims), self._key, algorithms=[ALGORITHM])

    def jwks(self) -> dict[str, Any]:
        """The public key set to verify receipts with (no private member)."""
        public = self._key.as_dict(private=False)
        return {"keys": [{**public, "use": "sig", "alg": ALGORITHM}]}


def verify_receipt(digest: str, jwks: dict[str, Any]) -> dict[str, Any]:
    """The claims of a certificate digest, once its signature verifies against ``jwks``."""
    try:
        keys = KeySet.import_key_set(jwks)  # type: ignore[arg-type]
        token = jws.deserialize_compact(digest, keys, algorithms=[ALGORITHM])
    except (JoseError, ValueError, KeyError, TypeError) as exc:
        raise ValidationFailed("the digest does not verify against this key set") from exc
    claims: dict[str, Any] = json.loads(token.payload)
    return claims
