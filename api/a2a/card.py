"""memesh's agent card: one document for A2A v1.0 and v0.3 parsers, signed at start-up.

Guarantees:
- The card lists two JSON-RPC interfaces at the same URL, ``<base>/a2a/v1``:
  protocol version 1.0 first (the preferred one) and 0.3. The SDK's card
  route (:func:`a2a.server.routes.create_agent_card_routes`) serves it with the
  v0.3 fields merged in (``url``, ``preferredTransport``, ``protocolVersion``,
  ``security`` and ``type``/``in`` in each scheme), so a v1.0 parser and a
  v0.3 parser both read it.
- Its security schemes are the two ways every memesh surface takes a key:
  ``serviceKey`` (the ``x-service-key`` header) and ``bearer``
  (``Authorization: Bearer <key>``); either one satisfies it. Streaming and
  push notifications are off (the spec shows no outbound webhook); there is
  no extended card.
- Skills only describe what a message can ask for (A2A has no "call a skill"
  method): every request is a ``SendMessage`` / ``message/send``.
- :func:`signed_card` adds one ES256 signature over the card's RFC 8785 form
  (A2A section 8.4, via the SDK's signer), its protected header naming the
  key (``kid``) and where its JWKS is published (``jku``). The card is fixed
  for the life of the process (never rebuilt from a request's ``Host``), so
  the head never signs a URL a caller chose.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    APIKeySecurityScheme,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0, TransportProtocol
from a2a.utils.signing import ProtectedHeader, create_agent_card_signer

from api.a2a.keys import ALGORITHM, KEYS_PATH, CardKey
from api.admission import KEY_HEADER
from api.openapi import API_VERSION

RPC_PATH = "/a2a/v1"
DATA = "application/json"
TEXT = "text/plain"
DEFAULT_DESCRIPTION = "Shared memory for agents: recall, query and write knowledge, sessions, beacons and the inbox."


@dataclass(frozen=True)
class A2aConfig:
    """What the A2A binding needs from the settings (``a2a.*``)."""

    base_url: str  # the external base URL, e.g. https://memesh.example.com
    data_dir: Path  # where the card-signing key is kept
    name: str = "memesh"
    description: str = DEFAULT_DESCRIPTION

    @property
    def rpc_url(self) -> str:
        return self.base_url.rstrip("/") + RPC_PATH

    @property
    def keys_url(self) -> str:
        return self.base_url.rstrip("/") + KEYS_PATH


def _skill(skill_id: str, name: str, description: str, *examples: str) -> AgentSkill:
    return AgentSkill(
        id=skill_id,
        name=name,
        description=description,
        tags=["memory"],
        examples=list(examples),
        input_modes=[DATA, TEXT] if skill_id == "memory.recall" else [DATA],
        output_modes=[DATA],
    )


SKILLS = [
    _skill(
        "memory.recall",
        "Recall",
        "What your tenant's agents already know about a subject: cells ranked by similarity blended with "
        'salience and recency, as {node_id, distance} hits. Send plain text, or a data part {"op": "recall", '
        '"text": ..., "k": ...}.',
        "what do we know about the payments retry policy?",
        '{"op": "recall", "text": "payments retry policy", "k": 5}',
    ),
    _skill(
        "memory.query",
        "Query",
        "The cells nearest a text by similarity alone, nearest first, as {node_id, distance} hits.",
        '{"op": "query", "text": "helm chart values", "k": 10, "cell_types": ["Decision"]}',
    ),
    _skill(
        "memory.write",
        "Write a cell",
        "Remember one decision, constraint, risk, lesson or fact; it joins a scene and reaches agents whose "
        "interests match it. get_scene reads a scene back.",
        '{"op": "write_cell", "content": "we deploy the api with helm", "cell_type": "Decision"}',
        '{"op": "get_scene", "scene_id": "0190c5a2-..."}',
    ),
    _skill(
        "memory.session",
        "Sessions",
        "Open a working session in a project (cells written with its id belong to it) and close it.",
        '{"op": "open_session", "project_id": "payments"}',
        '{"op": "close_session", "session_id": "0190c5a2-..."}',
    ),
    _skill(
        "memory.beacon",
        "Beacons",
        "Place a standing interest: new cells that match it are delivered to your inbox. Remove it when done.",
        '{"op": "place_beacon", "interest": "database migrations", "ttl_s": 86400}',
        '{"op": "remove_beacon", "node_id": "0190c5a2-..."}',
    ),
    _skill(
        "memory.inbox",
        "Inbox",
        "Drain your inbox: deliveries after your cursor, best first; ack the largest sequence you handled.",
        '{"op": "pull_inbox", "ack": 42, "limit": 50}',
    ),
]


def build_card(config: A2aConfig) -> AgentCard:
    """The unsigned card."""
    interfaces = [
        AgentInterface(url=config.rpc_url, protocol_binding=TransportProtocol.JSONRPC, protocol_version=version)
        for version in (PROTOCOL_VERSION_1_0, PROTOCOL_VERSION_0_3)
    ]
    key_scheme = APIKeySecurityScheme(location="header", name=KEY_HEADER, description="The agent's memesh API key.")
    bearer_scheme = HTTPAuthSecurityScheme(scheme="bearer", description="The same API key, as a bearer token.")
    return AgentCard(
        name=config.name,
        description=config.description,
        version=API_VERSION,
        supported_interfaces=interfaces,
        capabilities=AgentCapabilities(streaming=False, push_notifications=False, extended_agent_card=False),
        default_input_modes=[DATA, TEXT],
        default_output_modes=[DATA],
        skills=SKILLS,
        security_schemes={
            "serviceKey": SecurityScheme(api_key_security_scheme=key_scheme),
            "bearer": SecurityScheme(http_auth_security_scheme=bearer_scheme),
        },
        security_requirements=[
            SecurityRequirement(schemes={"serviceKey": StringList()}),
            SecurityRequirement(schemes={"bearer": StringList()}),
        ],
    )


def signed_card(config: A2aConfig, key: CardKey) -> AgentCard:
    """The card with one signature by ``key`` (``kid``, and ``jku`` = the published JWKS)."""
    header = ProtectedHeader(alg=ALGORITHM, kid=key.kid, jku=config.keys_url, typ="JOSE")
    sign = create_agent_card_signer(key.signing_key(), header)
    return sign(build_card(config))
