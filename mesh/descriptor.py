"""Agent descriptors: card-shaped, inert metadata about what an agent is and can do.

A descriptor never feeds authentication, authorization or trust (spec section 2).
This module holds the stored, normalised :class:`Descriptor`, its own wire form
(:meth:`Descriptor.to_json` and :meth:`Descriptor.from_json`, the origin
included), the ``PUT`` body, which is that wire form minus ``origin``
(:func:`descriptor_from_manual`), and :func:`within_limits`, the one check every
descriptor passes whatever its source. A2A cards and ACP documents are read in
:mod:`mesh.descriptor_import`; the limits themselves are in
:mod:`mesh.descriptor_limits`.

Guarantees: every descriptor built by this module or :mod:`mesh.descriptor_import`
has passed :func:`within_limits`, so a stored descriptor always reads back
through :meth:`Descriptor.from_json`. Every bad document raises
:class:`~mesh.errors.ValidationFailed` with a redaction-safe message naming the
field. Canonical JSON and signatures live in ``head.card_signing``; callers pass
the canonical size and digest in.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from mesh.descriptor_limits import (
    LABEL_MAX,
    MAX_CAPABILITIES,
    MAX_INTERFACES,
    MAX_MODES,
    MAX_SKILLS,
    MAX_TAGS,
    NAME_MAX,
    TEXT_MAX,
    check_count,
    check_labels,
    check_length,
    check_url,
)
from mesh.errors import ValidationFailed
from mesh.json_fields import as_object, objects, optional_bool, optional_string, string, strings


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
        body = dict(as_object(data, "descriptor"))
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
    doc = as_object(body, "descriptor")
    if "origin" in doc:
        raise ValidationFailed("origin is set by the server and cannot be sent")
    unknown = sorted(set(doc) - _MANUAL_KEYS)
    if unknown:
        raise ValidationFailed(f"unknown descriptor field {unknown[0]!r}", shape=True)
    listed = objects(doc, "interfaces", "descriptor")
    interfaces = tuple(
        read_interface(o, f"interfaces[{n}]", "protocol_binding", version_key="protocol_version") for n, o in listed
    )
    skills = tuple(
        Skill(
            id=string(o, "id", f"skills[{n}]"),
            name=string(o, "name", f"skills[{n}]"),
            description=string(o, "description", f"skills[{n}]", default=""),
            tags=strings(o, "tags", f"skills[{n}]"),
        )
        for n, o in objects(doc, "skills", "descriptor")
    )
    capabilities = as_object(doc.get("capabilities", {}), "descriptor.capabilities")
    for key, value in capabilities.items():
        if not isinstance(value, bool):
            raise ValidationFailed(f"descriptor.capabilities.{key} must be a boolean", shape=True)
    provider = doc.get("provider")
    return within_limits(
        Descriptor(
            name=string(doc, "name", "descriptor"),
            description=string(doc, "description", "descriptor", default=""),
            version=string(doc, "version", "descriptor", default=""),
            interfaces=interfaces,
            skills=skills,
            capabilities=dict(capabilities),
            provider=None
            if provider is None
            else read_provider(as_object(provider, "descriptor.provider"), "descriptor.provider"),
            documentation_url=optional_string(doc, "documentation_url", "descriptor"),
            default_input_modes=strings(doc, "default_input_modes", "descriptor"),
            default_output_modes=strings(doc, "default_output_modes", "descriptor"),
        )
    )


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


# -- limits: one check for every source ----------------------------------------------------------


def within_limits(d: Descriptor) -> Descriptor:
    """``d`` itself once every field is within the limits of :mod:`mesh.descriptor_limits`."""
    check_length(d.name, "name", 1, NAME_MAX)
    check_length(d.description, "description", 0, TEXT_MAX)
    check_length(d.version, "version", 0, LABEL_MAX)
    check_count(d.interfaces, "interfaces", MAX_INTERFACES)
    for n, i in enumerate(d.interfaces):
        check_url(i.url, f"interfaces[{n}].url")
        check_length(i.protocol_binding, f"interfaces[{n}].protocol_binding", 1, LABEL_MAX)
        check_length(i.protocol_version, f"interfaces[{n}].protocol_version", 1, LABEL_MAX)
    check_count(d.skills, "skills", MAX_SKILLS)
    for n, s in enumerate(d.skills):
        check_length(s.id, f"skills[{n}].id", 1, LABEL_MAX)
        check_length(s.name, f"skills[{n}].name", 1, NAME_MAX)
        check_length(s.description, f"skills[{n}].description", 0, TEXT_MAX)
        check_labels(s.tags, f"skills[{n}].tags", MAX_TAGS)
    check_count(d.capabilities, "capabilities", MAX_CAPABILITIES)
    for key in d.capabilities:
        check_length(key, "capabilities key", 1, LABEL_MAX)
    if d.provider is not None:
        check_length(d.provider.organization, "provider.organization", 1, LABEL_MAX)
        if d.provider.url is not None:
            check_url(d.provider.url, "provider.url")
    if d.documentation_url is not None:
        check_url(d.documentation_url, "documentation_url")
    check_labels(d.default_input_modes, "default_input_modes", MAX_MODES)
    check_labels(d.default_output_modes, "default_output_modes", MAX_MODES)
    return d


# -- fields shared by the PUT body and A2A cards -------------------------------------------------


def read_interface(
    obj: dict[str, Any], at: str, binding_key: str, version: str | None = None, version_key: str = "protocolVersion"
) -> Interface:
    """An interface; ``version`` given means the object carries none (v0.3 ``additionalInterfaces``)."""
    return Interface(
        string(obj, "url", at), string(obj, binding_key, at), version if version is not None else string(obj, version_key, at)
    )


def read_provider(obj: dict[str, Any], at: str, *, url_required: bool = False) -> Provider:
    return Provider(string(obj, "organization", at), string(obj, "url", at) if url_required else optional_string(obj, "url", at))


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
    o = as_object(data, "origin")
    try:
        fmt, shape = DescriptorFormat(o.get("format", "")), CardShape(o.get("card_shape", ""))
        imported_at = datetime.fromisoformat(string(o, "imported_at", "origin"))
    except ValueError:
        raise ValidationFailed("origin has an unknown format, card_shape or imported_at") from None
    digest = string(o, "document_sha256", "origin")
    if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
        raise ValidationFailed("origin.document_sha256 must be 64 lowercase hex digits")
    raw = o.get("signature")
    signature = None
    if raw is not None:
        sig = as_object(raw, "origin.signature")
        verified = optional_bool(sig, "verified", "origin.signature")
        signature = SignatureCheck(bool(verified), string(sig, "kid", "origin.signature"), string(sig, "alg", "origin.signature"))
    return import_origin(fmt, shape, o.get("provider"), digest, signature, imported_at)


__all__ = [
    "CardShape",
    "Descriptor",
    "DescriptorFormat",
    "Interface",
    "Origin",
    "Provider",
    "SignatureCheck",
    "Skill",
    "descriptor_from_manual",
    "import_origin",
    "read_interface",
    "read_provider",
    "within_limits",
]
