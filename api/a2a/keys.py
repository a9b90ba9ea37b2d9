"""The agent-card signing key: kept under the data directory, its public half published as a JWKS.

Guarantees:
- One ES256 (P-256) key per data directory, created on the first start with
  A2A enabled (``<data_dir>/card-signing-key.json``, mode 0600, written
  durably by :func:`head.private_files.write_private_file`) and reused by
  every later start, so a card signed before a restart keeps verifying.
- :meth:`CardKey.jwks` holds the public members only (no ``d``); it is what
  ``GET /.well-known/memesh-card-keys.json`` serves, the URL each signature's
  protected header names as ``jku`` beside the key's ``kid``.
- The private key never leaves the head process: it signs the card once, at
  start-up (:func:`api.a2a.card.signed_card`).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from joserfc.jwk import ECKey
from jwt.api_jwk import PyJWK

from head.private_files import load_or_create_key

ALGORITHM = "ES256"
KEY_FILE = "card-signing-key.json"
KEYS_PATH = "/.well-known/memesh-card-keys.json"


class CardKey:
    def __init__(self, key: ECKey) -> None:
        self._key = key

    @classmethod
    def load_or_create(cls, data_dir: Path) -> CardKey:
        """The deployment's card key: read from ``data_dir``, or generated and written there (0600) once."""
        generate = partial(ECKey.generate_key, "P-256", auto_kid=True)
        return cls(load_or_create_key(data_dir / KEY_FILE, generate, ECKey.import_key, lambda k: k.as_dict(private=True)))

    @property
    def kid(self) -> str:
        return str(self._key.kid)

    def signing_key(self) -> PyJWK:
        """The private key in the form the A2A SDK's signer takes."""
        return PyJWK(self._key.as_dict(private=True), algorithm=ALGORITHM)

    def jwks(self) -> dict[str, Any]:
        """The public key set that verifies the card's signature (no private member)."""
        public = self._key.as_dict(private=False)
        return {"keys": [{**public, "use": "sig", "alg": ALGORITHM}]}
