"""Reading another protocol's agent document into a descriptor: A2A agent cards and ACP agent-info documents.

:func:`parse_import` dispatches an import body's ``format`` and ``document`` to
:func:`parse_a2a_card` (A2A v1.0 ``supportedInterfaces`` or v0.3 ``url`` +
``preferredTransport``) or :func:`parse_acp_document` (the IBM/BeeAI
AgentManifest or the AGNTCY Agent Connect descriptor), which normalise each
shape to the same :class:`~mesh.descriptor.Descriptor` and report which shape
it was. Guarantees: every descriptor returned here has passed
:func:`~mesh.descriptor.within_limits`, as a ``PUT`` body does, and carries no
origin (the caller adds it with :func:`~mesh.descriptor.import_origin`); every
bad document raises :class:`~mesh.errors.ValidationFailed` naming the field.
"""

from __future__ import annotations

from mesh.descriptor import (
    CardShape,
    Descriptor,
    DescriptorFormat,
    Interface,
    Provider,
    Skill,
    read_interface,
    read_provider,
    within_limits,
)
from mesh.descriptor_limits import MAX_DOCUMENT_BYTES, check_depth
from mesh.errors import ValidationFailed
from mesh.json_fields import as_object, objects, optional_bool, optional_string, required_field, string, strings


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


def is_same_import(stored: Descriptor | None, document_sha256: str) -> bool:
    """True when ``stored`` came from an import of the very same document (same canonical digest).

    Such a re-import returns ``stored`` unchanged and records nothing (spec rule 5).
    """
    origin = stored.origin if stored else None
    return origin is not None and origin.format != DescriptorFormat.MANUAL and origin.document_sha256 == document_sha256


def parse_a2a_card(doc: object) -> tuple[Descriptor, CardShape]:
    """An A2A agent card; v1 when it has ``supportedInterfaces`` (even beside ``url``), v0.3 when it has ``url``.

    v1 requires non-empty ``supportedInterfaces``, ``skills``, ``defaultInputModes``
    and ``defaultOutputModes``, and ``protocolVersion`` on each interface. v0.3
    allows empty arrays and defaults ``preferredTransport`` to ``JSONRPC`` and
    ``protocolVersion`` to ``0.3.0``, as its schema does.
    """
    card = as_object(doc, "card")
    check_depth(card)
    if "supportedInterfaces" in card:
        shape, v1 = CardShape.A2A_V1, True
        listed = objects(card, "supportedInterfaces", "card", required=True, non_empty=True)
        interfaces = [read_interface(o, f"card.supportedInterfaces[{n}]", "protocolBinding") for n, o in listed]
    elif "url" in card:
        shape, v1 = CardShape.A2A_V03, False
        version = string(card, "protocolVersion", "card", default="0.3.0")
        interfaces = [
            Interface(string(card, "url", "card"), string(card, "preferredTransport", "card", default="JSONRPC"), version)
        ]
        listed = objects(card, "additionalInterfaces", "card")
        interfaces += [read_interface(o, f"card.additionalInterfaces[{n}]", "transport", version) for n, o in listed]
    else:
        raise ValidationFailed("card has neither supportedInterfaces (v1) nor url (v0.3)")
    skills = []
    for n, o in objects(card, "skills", "card", required=True, non_empty=v1):
        at = f"card.skills[{n}]"
        for key in ("examples", "inputModes", "outputModes"):
            strings(o, key, at)
        skills.append(
            Skill(
                string(o, "id", at),
                string(o, "name", at),
                string(o, "description", at),
                strings(o, "tags", at, required=True, non_empty=v1),
            )
        )
    capabilities = as_object(required_field(card, "capabilities", "card"), "card.capabilities")
    flags = {"streaming": "streaming", "pushNotifications": "push_notifications"}
    flags.update({"extendedAgentCard": "extended_agent_card"} if v1 else {"stateTransitionHistory": "state_transition_history"})
    normalised = {
        name: value for key, name in flags.items() if (value := optional_bool(capabilities, key, "card.capabilities")) is not None
    }
    if not v1 and optional_bool(card, "supportsAuthenticatedExtendedCard", "card") is not None:
        normalised["extended_agent_card"] = card["supportsAuthenticatedExtendedCard"]
    objects(capabilities, "extensions", "card.capabilities")
    provider = card.get("provider")
    descriptor = Descriptor(
        name=string(card, "name", "card"),
        description=string(card, "description", "card"),
        version=string(card, "version", "card"),
        interfaces=tuple(dict.fromkeys(interfaces)),  # v0.3 cards often repeat the main url in additionalInterfaces
        skills=tuple(skills),
        capabilities=normalised,
        provider=None
        if provider is None
        else read_provider(as_object(provider, "card.provider"), "card.provider", url_required=True),
        documentation_url=optional_string(card, "documentationUrl", "card"),
        default_input_modes=strings(card, "defaultInputModes", "card", required=True, non_empty=v1),
        default_output_modes=strings(card, "defaultOutputModes", "card", required=True, non_empty=v1),
    )
    return within_limits(descriptor), shape


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
    body = as_object(doc, "document")
    check_depth(body)
    meta = body.get("metadata")
    if isinstance(meta, dict) and "ref" in meta:
        ref = as_object(meta["ref"], "document.metadata.ref")
        specs = as_object(required_field(body, "specs", "document"), "document.specs")
        raw = as_object(specs.get("capabilities", {}), "document.specs.capabilities")
        capabilities = {
            k: v
            for k in ("threads", "interrupts", "callbacks")
            if (v := optional_bool(raw, k, "document.specs.capabilities")) is not None
        }
        if "streaming" in raw:
            streaming = as_object(raw["streaming"], "document.specs.capabilities.streaming")
            capabilities["streaming"] = any(
                optional_bool(streaming, k, "document.specs.capabilities.streaming") for k in ("values", "custom")
            )
        descriptor = Descriptor(
            name=string(ref, "name", "document.metadata.ref"),
            description=string(meta, "description", "document.metadata"),
            version=string(ref, "version", "document.metadata.ref"),
            capabilities=capabilities,
            documentation_url=optional_string(ref, "url", "document.metadata.ref"),
        )
        return within_limits(descriptor), CardShape.AGNTCY_ACP
    if "name" not in body:
        raise ValidationFailed("document is neither an ACP AgentManifest (name) nor an AGNTCY descriptor (metadata.ref)")
    meta = as_object(body.get("metadata", {}), "document.metadata")
    skills = []
    for n, o in objects(meta, "capabilities", "document.metadata"):
        at = f"document.metadata.capabilities[{n}]"
        skills.append(
            Skill(id=string(o, "name", at), name=string(o, "name", at), description=string(o, "description", at, default=""))
        )
    author = meta.get("author")
    provider = None
    if author is not None:
        author = as_object(author, "document.metadata.author")
        name = optional_string(author, "name", "document.metadata.author")
        provider = Provider(name, optional_string(author, "url", "document.metadata.author")) if name else None
    links = [
        (optional_string(o, "type", f"document.metadata.links[{n}]"), o) for n, o in objects(meta, "links", "document.metadata")
    ]
    docs = next((optional_string(o, "url", "document.metadata.links") for kind, o in links if kind == "documentation"), None)
    descriptor = Descriptor(
        name=string(body, "name", "document"),
        description=string(body, "description", "document"),
        skills=tuple(skills),
        provider=provider,
        documentation_url=docs,
        default_input_modes=strings(body, "input_content_types", "document"),
        default_output_modes=strings(body, "output_content_types", "document"),
    )
    return within_limits(descriptor), CardShape.ACP_MANIFEST


__all__ = ["is_same_import", "parse_a2a_card", "parse_acp_document", "parse_import"]
