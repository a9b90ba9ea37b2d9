"""Descriptor use cases: read, set and import an agent's card-shaped description.

Guarantees:
- Descriptors are inert metadata: nothing in authentication, authorization
  or the mesh reads them.
- Authority as for agents (spec section 5): a ProjectAdmin reading an agent
  of another tenant gets NotFound, as for a missing one; setting or importing
  there is Forbidden with an ``AuthzDenied`` row and nothing stored.
- Every change writes its ``DescriptorSet`` / ``DescriptorImport`` row before
  the descriptor is stored, so no stored descriptor lacks its row; a failed
  row fails the request with nothing stored, and a store that then fails adds
  a row with outcome ``failed``. An import of the very document already
  imported (same RFC 8785 digest) returns the stored descriptor unchanged and
  writes nothing (idempotent, rule 5).
- A signed card is verified against the supplied JWKS before anything is
  stored; a signature that does not verify rejects the import (fail-closed).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace
from typing import Any

from head.audit import record
from head.card_signing import canonical_bytes, document_digest, verify_import_signatures
from mesh.audit import AuditKind
from mesh.descriptor import CardShape, Descriptor, DescriptorFormat, Origin, descriptor_from_manual, import_origin
from mesh.descriptor_import import is_same_import, parse_import
from mesh.descriptor_limits import check_depth
from mesh.errors import Forbidden, MemeshError, NotFound
from mesh.identity import Agent, Principal, check_can_mutate_agent, check_can_read_agent, require_admin
from mesh.ids import Clock
from mesh.seam import Directory


class DescriptorService:
    def __init__(self, directory: Directory, clock: Clock) -> None:
        self._dir = directory
        self._clock = clock

    async def get(self, actor: Principal, agent_id: str) -> Descriptor:
        require_admin(actor)
        agent: Agent = await self._dir.registry().get(agent_id)
        check_can_read_agent(actor, agent)
        stored = await self._stored(agent_id)
        if stored is None:
            raise NotFound("the agent has no descriptor")
        return stored

    async def put(self, actor: Principal, agent_id: str, body: object) -> Descriptor:
        await self._target(actor, agent_id, "descriptor_set")
        descriptor = descriptor_from_manual(body)
        digest = document_digest(descriptor.to_json())
        origin = Origin(DescriptorFormat.MANUAL, CardShape.MANUAL, None, digest, None, self._clock())
        stored = replace(descriptor, origin=origin)
        await self._store(actor, AuditKind.DESCRIPTOR_SET, agent_id, stored, {"document_sha256": digest})
        return stored

    async def import_document(
        self, actor: Principal, agent_id: str, fmt: str, document: object, jwks: object | None, provider: object
    ) -> Descriptor:
        await self._target(actor, agent_id, "descriptor_import")
        check_depth(document)
        canonical = canonical_bytes(document)
        parsed, shape = parse_import(fmt, document, canonical_size=len(canonical))
        signature = verify_import_signatures(fmt, document, jwks)  # before anything else: fail-closed, every time
        digest = document_digest(document)
        current = await self._stored(agent_id)
        if current is not None and is_same_import(current, digest):
            return current
        origin = import_origin(DescriptorFormat(fmt), shape, provider, digest, signature, self._clock())
        stored = replace(parsed, origin=origin)
        detail: dict[str, Any] = {
            "format": fmt,
            "card_shape": shape.value,
            "document_sha256": digest,
            "signature_verified": signature is not None,
        }
        await self._store(actor, AuditKind.DESCRIPTOR_IMPORT, agent_id, stored, detail)
        return stored

    async def _store(self, actor: Principal, kind: AuditKind, agent_id: str, stored: Descriptor, detail: dict[str, Any]) -> None:
        """The audit row, then the descriptor; a store that fails after the row adds a ``failed`` row."""
        await record(self._dir, actor, kind, agent_id, "ok", detail)
        try:
            await self._dir.registry().put_descriptor(agent_id, json.dumps(stored.to_json(), sort_keys=True))
        except MemeshError as exc:
            with contextlib.suppress(MemeshError):
                await record(self._dir, actor, kind, agent_id, "failed", {**detail, "error": str(exc.code)})
            raise

    async def _target(self, actor: Principal, agent_id: str, action: str) -> Agent:
        require_admin(actor)
        agent: Agent = await self._dir.registry().get(agent_id)
        try:
            check_can_mutate_agent(actor, agent)
        except Forbidden:
            await record(self._dir, actor, AuditKind.AUTHZ_DENIED, agent_id, "denied", {"action": action})
            raise
        return agent

    async def _stored(self, agent_id: str) -> Descriptor | None:
        text: str | None = await self._dir.registry().get_descriptor(agent_id)
        return Descriptor.from_json(json.loads(text)) if text is not None else None
