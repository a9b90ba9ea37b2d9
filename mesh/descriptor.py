"""Agent descriptors: card-shaped, inert metadata about what an agent is and can do.

A descriptor never feeds authentication, authorization or trust (spec section 2).
It comes from one of three sources, each normalised to the same :class:`Descriptor`:

- ``PUT`` of the descriptor's own wire form minus ``origin`` (:func:`descriptor_from_manual`);
- an A2A agent card, v1.0 (``supportedInterfaces``) or v0.3 (``url`` +
  ``preferredTransport``) (:func:`parse_a2a_card`);
- an ACP agent-info document: the IBM/BeeAI AgentManifest or the AGNTCY
  Agent Connect descriptor (:func:`parse_acp_document`).

Guarantees: every descriptor this module returns has passed the same limits
(:data:`NAME_MAX`, :data:`MAX_SKILLS`, ...), whatever its source, so a stored
descriptor always reads back through :meth:`Descriptor.from_json`. Every bad
document raises :class:`~mesh.errors.ValidationFailed` with a redaction-safe
message naming the field. Canonical JSON and signatures live in
``head.card_signing``; callers pass the canonical size and digest in.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from mesh.errors import ValidationFailed

NAME_MAX = 128
LABEL_MAX = 128  # versions, ids, tags, media types, bindings, organisations
TEXT_MAX = 4096  # descriptions
URL_MAX = 2048
MAX_SKILLS = 64
MAX_INTERFACES = 16
MAX_TAGS = 32
MAX_MODES = 32
MAX_CAPABILITIES = 16
MAX_DOCUMENT_BYTES = 64 * 1024  # of the RFC 8785 canonical form
MAX_DEPTH = 32  # nested objects and arrays; real cards stay under 10


class DescriptorFormat(StrEnum):
    A2A = "a2a"
    ACP = "acp"
    MANUAL = "manual"


class CardShape(StrEnum):
    A2A_V1 = "a2a-v1"
    A2A_V03 = "a2a-v0.3"
    ACP_MANIFEST = "acp-manifest"
    AGNTCY_ACP = "agntcy-acp"
    MANUAL = "manual"


@dataclass(frozen=True, slots=True)
class Interface:
    url: str
    protocol_binding: str
    protocol_version: str


@dataclass(frozen=True, slots=True)
class Skill:
    id: str
    name: str
    description: str = ""
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Provider:
    organization: str
    url: str | None = None


@dataclass(frozen=True, slots=True)
class SignatureCheck:
    """The signature that verified an imported card (unsigned cards have none)."""

    verified: bool
    kid: str
    alg: str


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a stored descriptor came from. ``provider`` is the import's free-form label."""

    format: DescriptorFormat
    card_shape: CardShape
    provider: str | None
    document_sha256: str  # SHA-256 hex of the RFC 8785 canonical document as received
    signature: SignatureCheck | None
    imported_at: datetime


@dataclass(frozen=True, slots=True)
class Descriptor:
    """The stored, normalised description. Build it through this module's parsers, which enforce the limits."""

    name: str
    description: str = ""
    version: str = ""
    interfaces: tuple[Interface, ...] = ()
    skills: tuple[Skill, ...] = ()
    capabilities: dict[str, bool] = field(default_factory=dict)  # snake_case flags: streaming, push_notifications, ...
    provider: Provider | None = None
    documentation_url: str | None = None
    default_input_modes: tuple[str, ...] = ()
    default_output_modes: tuple[str, ...] = ()
    origin: Origin | None = None

    def to_json(self) -> dict[str, Any]:
        """The wire and storage form: snake_case keys, every key present, ``origin`` null for none."""
        return {
            "name": self.name,
            "description": self.description,
            "version": self.version,
            "interfaces": [
                {"url": i.url, "protocol_binding": i.protocol_binding, "protocol_version": i.protocol_version}
                for i in self.interfaces
            ],
            "skills": [{"id": s.id, "name": s.name, "description": s.description, "tags": list(s.tags)} for s in self.skills],
            "capabilities": dict(self.capabilities),
            "provider": None if self.provider is None else {"organization": self.provider.organization, "url": self.provider.url},
            "documentation_url": self.documentation_url,
            "default_input_modes": list(self.default_input_modes),
            "default_output_modes": list(self.default_output_modes),
            "origin": None if self.origin is None else _origin_json(self.origin),
        }

    @staticmethod
    def from_json(data: object) -> Descriptor:
        """The inverse of :meth:`to_json`, with the same checks as a PUT body."""
        body = dict(_object(data, "descriptor"))
        origin = body.pop("origin", None)
        descriptor = descriptor_from_manual(body)
        return descriptor if origin is None else replace(descriptor, origin=_origin_from_json(origin))


# -- the PUT body --------------------------------------------------------------------------------

_MANUAL_KEYS = frozenset(Descriptor.__dataclass_fields__) - {"origin"}


def descriptor_from_manual(body: object) -> Descriptor:
    """The descriptor a ``PUT`` sets: the wire form of :meth:`Descriptor.to_json` minus ``origin``.

    Only ``name`` is required; absent lists are empty, absent strings empty or
    null as in the wire form. Unknown keys are refused, so a typo is an error
    rather than silently dropped. The result carries no origin; the caller adds
    ``Origin(format=MANUAL, card_shape=MANUAL, ...)``.
    """
    doc = _object(body, "descriptor")
    if "origin" in doc:
        raise ValidationFailed("origin is set by the server and cannot be sent")
    unknown = sorted(set(doc) - _MANUAL_KEYS)
    if unknown:
        raise ValidationFailed(f"unknown descriptor field {unknown[0]!r}")
    listed = _objects(doc, "interfaces", "descriptor")
    interfaces = tuple(_interface(o, f"interfaces[{n}]", "protocol_binding", version_key="protocol_version") for n, o in listed)
    skills = tuple(
        Skill(
            id=_str(o, "id", f"skills[{n}]"),
            name=_str(o, "name", f"skills[{n}]"),
            description=_str(o, "description", f"skills[{n}]", default=""),
            tags=_strs(o, "tags", f"skills[{n}]"),
        )
        for n, o in _objects(doc, "skills", "descriptor")
    )
    capabilities = _object(doc.get("capabilities", {}), "descriptor.capabilities")
    for key, value in capabilities.items():
        if not isinstance(value, bool):
            raise ValidationFailed(f"descriptor.capabilities.{key} must be a boolean")
    provider = doc.get("provider")
    return _checked(
        Descriptor(
            name=_str(doc, "name", "descriptor"),
            description=_str(doc, "description", "descriptor", default=""),
            version=_str(doc, "version", "descriptor", default=""),
            interfaces=interfaces,
            skills=skills,
            capabilities=dict(capabilities),
            provider=None if provider is None else _provider(_object(provider, "descriptor.provider"), "descriptor.provider"),
            documentation_url=_opt_str(doc, "documentation_url", "descriptor"),
            default_input_modes=_strs(doc, "default_input_modes", "descriptor"),
            default_output_modes=_strs(doc, "default_output_modes", "descriptor"),
        )
    )


# -- imports -------------------------------------------------------------------------------------


def parse_import(fmt: object, document: object, *, canonical_size: int) -> tuple[Descriptor, CardShape]:
    """The descriptor (without origin) and shape of an import body's ``format`` and ``document``.

    ``canonical_size`` is the byte length of the document's RFC 8785 form,
    which must not exceed :data:`MAX_DOCUMENT_BYTES`.
    """
    if canonical_size > MAX_DOCUMENT_BYTES:
        raise ValidationFailed(f"document exceeds {MAX_DOCUMENT_BYTES} bytes in canonical form")
    if fmt == DescriptorFormat.A2A:
        return parse_a2a_card(document)
    if fmt == DescriptorFormat.ACP:
        return parse_acp_document(document)
    raise ValidationFailed("format must be 'a2a' or 'acp'")


def import_origin(
    fmt: DescriptorFormat,
    card_shape: CardShape,
    provider: object,
    document_sha256: str,
    signature: SignatureCheck | None,
    imported_at: datetime,
) -> Origin:
    """The origin of an import; ``provider`` is the body's optional label (a string of 1 to 128 characters)."""
    if provider is not None and not (isinstance(provider, str) and 1 <= len(provider) <= LABEL_MAX):
        raise ValidationFailed(f"provider must be a string of 1 to {LABEL_MAX} characters")
    return Origin(fmt, card_shape, provider, document_sha256, signature, imported_at)


def is_same_import(stored: Descriptor | None, document_sha256: str) -> bool:
    """True when ``stored`` came from an import of the very same document (same canonical digest).

    Such a re-import returns ``stored`` unchanged and records nothing (spec rule 5).
    """
    origin = stored.origin if stored else None
    return origin is not None and origin.format != DescriptorFormat.MANUAL and origin.document_sha256 == document_sha256


def check_depth(document: object) -> None:
    """Refuse nesting deeper than :data:`MAX_DEPTH` without recursing (safe on any parsed JSON)."""
    stack: list[tuple[object, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is None:
            continue
        if depth > MAX_DEPTH:
            raise ValidationFailed(f"document nests deeper than {MAX_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)


def parse_a2a_card(doc: object) -> tuple[Descriptor, CardShape]:
    """An A2A agent card; v1 when it has ``supportedInterfaces`` (even beside ``url``), v0.3 when it has ``url``.

    v1 requires non-empty ``supportedInterfaces``, ``skills``, ``defaultInputModes``
    and ``defaultOutputModes``, and ``protocolVersion`` on each interface. v0.3
    allows empty arrays and defaults ``preferredTransport`` to ``JSONRPC`` and
    ``protocolVersion`` to ``0.3.0``, as its schema does.
    """
    card = _object(doc, "card")
    check_depth(card)
    if "supportedInterfaces" in card:
        shape, v1 = CardShape.A2A_V1, True
        listed = _objects(card, "supportedInterfaces", "card", required=True, non_empty=True)
        interfaces = [_interface(o, f"card.supportedInterfaces[{n}]", "protocolBinding") for n, o in listed]
    elif "url" in card:
        shape, v1 = CardShape.A2A_V03, False
        version = _str(card, "protocolVersion", "card", default="0.3.0")
        interfaces = [Interface(_str(card, "url", "card"), _str(card, "preferredTransport", "card", default="JSONRPC"), version)]
        listed = _objects(card, "additionalInterfaces", "card")
        interfaces += [_interface(o, f"card.additionalInterfaces[{n}]", "transport", version) for n, o in listed]
    else:
        raise ValidationFailed("card has neither supportedInterfaces (v1) nor url (v0.3)")
    skills = []
    for n, o in _objects(card, "skills", "card", required=True, non_empty=v1):
        at = f"card.skills[{n}]"
        for key in ("examples", "inputModes", "outputModes"):
            _strs(o, key, at)
        skills.append(
            Skill(
                _str(o, "id", at),
                _str(o, "name", at),
                _str(o, "description", at),
                _strs(o, "tags", at, required=True, non_empty=v1),
            )
        )
    capabilities = _object(_required(card, "capabilities", "card"), "card.capabilities")
    flags = {"streaming": "streaming", "pushNotifications": "push_notifications"}
    flags.update({"extendedAgentCard": "extended_agent_card"} if v1 else {"stateTransitionHistory": "state_transition_history"})
    normalised = {
        name: value for key, name in flags.items() if (value := _bool(capabilities, key, "card.capabilities")) is not None
    }
    if not v1 and _bool(card, "supportsAuthenticatedExtendedCard", "card") is not None:
        normalised["extended_agent_card"] = card["supportsAuthenticatedExtendedCard"]
    _objects(capabilities, "extensions", "card.capabilities")
    provider = card.get("provider")
    descriptor = Descriptor(
        name=_str(card, "name", "card"),
        description=_str(card, "description", "card"),
        version=_str(card, "version", "card"),
        interfaces=tuple(dict.fromkeys(interfaces)),  # v0.3 cards often repeat the main url in additionalInterfaces
        skills=tuple(skills),
        capabilities=normalised,
        provider=None if provider is None else _provider(_object(provider, "card.provider"), "card.provider", url_required=True),
        documentation_url=_opt_str(card, "documentationUrl", "card"),
        default_input_modes=_strs(card, "defaultInputModes", "card", required=True, non_empty=v1),
        default_output_modes=_strs(card, "defaultOutputModes", "card", required=True, non_empty=v1),
    )
    return _checked(descriptor), shape


def parse_acp_document(doc: object) -> tuple[Descriptor, CardShape]:
    """An ACP agent-info document: AGNTCY when ``metadata.ref`` is present, else an IBM/BeeAI AgentManifest.

    AGNTCY (``{metadata: {ref: {name, version, url?}, description}, specs: {capabilities, ...}}``):
    name, version and description required; ``ref.url`` becomes ``documentation_url``;
    the ``specs.capabilities`` flags are kept (``streaming`` true when either stream kind is).
    AgentManifest (``{name, description, input_content_types, output_content_types, metadata}``):
    name and description required; content types become the default modes;
    ``metadata.capabilities[{name, description}]`` become skills; ``metadata.author``
    becomes the provider; a ``metadata.links`` entry of type ``documentation`` the documentation URL.
    """
    body = _object(doc, "document")
    check_depth(body)
    meta = body.get("metadata")
    if isinstance(meta, dict) and "ref" in meta:
        ref = _object(meta["ref"], "document.metadata.ref")
        specs = _object(_required(body, "specs", "document"), "document.specs")
        raw = _object(specs.get("capabilities", {}), "document.specs.capabilities")
        capabilities = {
            k: v
            for k in ("threads", "interrupts", "callbacks")
            if (v := _bool(raw, k, "document.specs.capabilities")) is not None
        }
        if "streaming" in raw:
            streaming = _object(raw["streaming"], "document.specs.capabilities.streaming")
            capabilities["streaming"] = any(
                _bool(streaming, k, "document.specs.capabilities.streaming") for k in ("values", "custom")
            )
        descriptor = Descriptor(
            name=_str(ref, "name", "document.metadata.ref"),
            description=_str(meta, "description", "document.metadata"),
            version=_str(ref, "version", "document.metadata.ref"),
            capabilities=capabilities,
            documentation_url=_opt_str(ref, "url", "document.metadata.ref"),
        )
        return _checked(descriptor), CardShape.AGNTCY_ACP
    if "name" not in body:
        raise ValidationFailed("document is neither an ACP AgentManifest (name) nor an AGNTCY descriptor (metadata.ref)")
    meta = _object(body.get("metadata", {}), "document.metadata")
    skills = []
    for n, o in _objects(meta, "capabilities", "document.metadata"):
        at = f"document.metadata.capabilities[{n}]"
        skills.append(Skill(id=_str(o, "name", at), name=_str(o, "name", at), description=_str(o, "description", at, default="")))
    author = meta.get("author")
    provider = None
    if author is not None:
        author = _object(author, "document.metadata.author")
        name = _opt_str(author, "name", "document.metadata.author")
        provider = Provider(name, _opt_str(author, "url", "document.metadata.author")) if name else None
    links = [(_opt_str(o, "type", f"document.metadata.links[{n}]"), o) for n, o in _objects(meta, "links", "document.metadata")]
    docs = next((_opt_str(o, "url", "document.metadata.links") for kind, o in links if kind == "documentation"), None)
    descriptor = Descriptor(
        name=_str(body, "name", "document"),
        description=_str(body, "description", "document"),
        skills=tuple(skills),
        provider=provider,
        documentation_url=docs,
        default_input_modes=_strs(body, "input_content_types", "document"),
        default_output_modes=_strs(body, "output_content_types", "document"),
    )
    return _checked(descriptor), CardShape.ACP_MANIFEST


# -- limits: one check for every source ----------------------------------------------------------


def _checked(d: Descriptor) -> Descriptor:
    _text(d.name, "name", 1, NAME_MAX)
    _text(d.description, "description", 0, TEXT_MAX)
    _text(d.version, "version", 0, LABEL_MAX)
    _count(d.interfaces, "interfaces", MAX_INTERFACES)
    for n, i in enumerate(d.interfaces):
        _url(i.url, f"interfaces[{n}].url")
        _text(i.protocol_binding, f"interfaces[{n}].protocol_binding", 1, LABEL_MAX)
        _text(i.protocol_version, f"interfaces[{n}].protocol_version", 1, LABEL_MAX)
    _count(d.skills, "skills", MAX_SKILLS)
    for n, s in enumerate(d.skills):
        _text(s.id, f"skills[{n}].id", 1, LABEL_MAX)
        _text(s.name, f"skills[{n}].name", 1, NAME_MAX)
        _text(s.description, f"skills[{n}].description", 0, TEXT_MAX)
        _labels(s.tags, f"skills[{n}].tags", MAX_TAGS)
    _count(d.capabilities, "capabilities", MAX_CAPABILITIES)
    for key in d.capabilities:
        _text(key, "capabilities key", 1, LABEL_MAX)
    if d.provider is not None:
        _text(d.provider.organization, "provider.organization", 1, LABEL_MAX)
        if d.provider.url is not None:
            _url(d.provider.url, "provider.url")
    if d.documentation_url is not None:
        _url(d.documentation_url, "documentation_url")
    _labels(d.default_input_modes, "default_input_modes", MAX_MODES)
    _labels(d.default_output_modes, "default_output_modes", MAX_MODES)
    return d


def _text(value: str, at: str, low: int, high: int) -> None:
    if not low <= len(value) <= high:
        raise ValidationFailed(f"{at} must be {low} to {high} characters")


def _count(values: tuple[object, ...] | dict[str, bool], at: str, most: int) -> None:
    if len(values) > most:
        raise ValidationFailed(f"{at} holds more than {most} entries")


def _labels(values: tuple[str, ...], at: str, most: int) -> None:
    _count(values, at, most)
    for value in values:
        _text(value, f"{at} entry", 1, LABEL_MAX)


def _url(value: str, at: str) -> None:
    try:
        parts = urlsplit(value)
    except ValueError:
        raise ValidationFailed(f"{at} is not a valid URL") from None
    if (
        len(value) > URL_MAX
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or not value.isprintable()
        or " " in value
    ):
        raise ValidationFailed(f"{at} must be an absolute http or https URL of at most {URL_MAX} characters")


# -- typed field access ---------------------------------------------------------------------------


def _object(value: object, at: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValidationFailed(f"{at} must be an object")
    return value


def _required(obj: dict[str, Any], key: str, at: str) -> object:
    if key not in obj:
        raise ValidationFailed(f"{at}.{key} is required")
    return obj[key]


def _str(obj: dict[str, Any], key: str, at: str, *, default: str | None = None) -> str:
    value = obj.get(key, default) if default is not None else _required(obj, key, at)
    if not isinstance(value, str):
        raise ValidationFailed(f"{at}.{key} must be a string")
    return value


def _opt_str(obj: dict[str, Any], key: str, at: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise ValidationFailed(f"{at}.{key} must be a string")
    return value


def _bool(obj: dict[str, Any], key: str, at: str) -> bool | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, bool):
        raise ValidationFailed(f"{at}.{key} must be a boolean")
    return value


def _list(obj: dict[str, Any], key: str, at: str, required: bool, non_empty: bool) -> list[Any]:
    value = _required(obj, key, at) if required else obj.get(key, [])
    if not isinstance(value, list):
        raise ValidationFailed(f"{at}.{key} must be an array")
    if non_empty and not value:
        raise ValidationFailed(f"{at}.{key} must not be empty")
    return value


def _strs(obj: dict[str, Any], key: str, at: str, *, required: bool = False, non_empty: bool = False) -> tuple[str, ...]:
    values = _list(obj, key, at, required, non_empty)
    if not all(isinstance(v, str) for v in values):
        raise ValidationFailed(f"{at}.{key} must be an array of strings")
    return tuple(values)


def _objects(
    obj: dict[str, Any], key: str, at: str, *, required: bool = False, non_empty: bool = False
) -> list[tuple[int, dict[str, Any]]]:
    return [(n, _object(v, f"{at}.{key}[{n}]")) for n, v in enumerate(_list(obj, key, at, required, non_empty))]


def _interface(
    obj: dict[str, Any], at: str, binding_key: str, version: str | None = None, version_key: str = "protocolVersion"
) -> Interface:
    """An interface; ``version`` given means the object carries none (v0.3 ``additionalInterfaces``)."""
    return Interface(
        _str(obj, "url", at), _str(obj, binding_key, at), version if version is not None else _str(obj, version_key, at)
    )


def _provider(obj: dict[str, Any], at: str, *, url_required: bool = False) -> Provider:
    return Provider(_str(obj, "organization", at), _str(obj, "url", at) if url_required else _opt_str(obj, "url", at))


# -- origin wire form ----------------------------------------------------------------------------


def _origin_json(o: Origin) -> dict[str, Any]:
    signature = o.signature
    return {
        "format": o.format.value,
        "card_shape": o.card_shape.value,
        "provider": o.provider,
        "document_sha256": o.document_sha256,
        "signature": None if signature is None else {"verified": signature.verified, "kid": signature.kid, "alg": signature.alg},
        "imported_at": o.imported_at.isoformat(),
    }


def _origin_from_json(data: object) -> Origin:
    o = _object(data, "origin")
    try:
        fmt, shape = DescriptorFormat(o.get("format", "")), CardShape(o.get("card_shape", ""))
        imported_at = datetime.fromisoformat(_str(o, "imported_at", "origin"))
    except ValueError:
        raise ValidationFailed("origin has an unknown format, card_shape or imported_at") from None
    digest = _str(o, "document_sha256", "origin")
    if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
        raise ValidationFailed("origin.document_sha256 must be 64 lowercase hex digits")
    raw = o.get("signature")
    signature = None
    if raw is not None:
        sig = _object(raw, "origin.signature")
        verified = _bool(sig, "verified", "origin.signature")
        signature = SignatureCheck(bool(verified), _str(sig, "kid", "origin.signature"), _str(sig, "alg", "origin.signature"))
    return import_origin(fmt, shape, o.get("provider"), digest, signature, imported_at)


__all__ = [
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "MAX_SKILLS",
    "NAME_MAX",
    "CardShape",
    "Descriptor",
    "DescriptorFormat",
    "Interface",
    "Origin",
    "Provider",
    "SignatureCheck",
    "Skill",
    "check_depth",
    "descriptor_from_manual",
    "import_origin",
    "is_same_import",
    "parse_a2a_card",
    "parse_acp_document",
    "parse_import",
]
