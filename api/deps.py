"""The FastAPI dependencies of every router, each one ``Annotated`` alias (one way to get each thing).

Guarantees:
- :data:`Core` is the facade the app was built with (``app.state.memesh``, set
  by :func:`api.app.create_app`); no route reads the app state itself.
- ``/v1`` (behind :class:`api.data.gate.V1Gate`, which authenticated the key):
  :data:`Reader`, :data:`Writer` and :data:`Drainer` are the gate's principal
  charged one token of the Read, Write and Inbox bucket
  (:func:`api.admission.charge_route`): 429 before the use case runs.
  :data:`Caller` is the gate's principal uncharged, for a route that charges
  once it knows the cost (a batch, per cell).
- ``/admin/api`` (behind :class:`api.console.gate.AdminGate`, which checked the
  session and the role): :data:`Operator` is the operator's principal (401 /
  403 should no gate have run), :data:`OperatorSession` its console session.
  :data:`ConsoleState` is the console's login state (``app.state.console``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends
from starlette.requests import HTTPConnection

from api.admission import charge_route, gate_principal
from api.console.oidc import Console
from head.facade import Bucket, Memesh
from mesh.console_sessions import ConsoleSession
from mesh.errors import Forbidden, Unauthorized
from mesh.identity import Principal


async def memesh_of(connection: HTTPConnection) -> Memesh:
    memesh: Memesh = connection.app.state.memesh
    return memesh


Core = Annotated[Memesh, Depends(memesh_of)]


# ------------------------------------------------------------------ /v1
def _charged(bucket: Bucket) -> Any:
    """A dependency (``Depends``) yielding the gate's principal, charged one token of ``bucket``."""

    async def dependency(connection: HTTPConnection, core: Core) -> Principal:
        return charge_route(core, connection.scope, bucket)

    return Depends(dependency)


async def _uncharged(connection: HTTPConnection) -> Principal:
    return gate_principal(connection.scope)


Reader = Annotated[Principal, _charged(Bucket.READ)]
Writer = Annotated[Principal, _charged(Bucket.WRITE)]
Drainer = Annotated[Principal, _charged(Bucket.INBOX)]
Caller = Annotated[Principal, Depends(_uncharged)]


# ------------------------------------------------------------------ /admin
def operator_of(connection: HTTPConnection) -> Principal:
    """The operator the session gate resolved; 401 / 403 should the gate ever not have run."""
    principal = connection.scope.get("state", {}).get("principal")
    if not isinstance(principal, Principal):
        raise Unauthorized("an operator session is required")
    if not principal.is_admin:
        raise Forbidden("the observatory is for operators")
    return principal


async def _operator(connection: HTTPConnection) -> Principal:
    return operator_of(connection)


async def _operator_session(connection: HTTPConnection) -> ConsoleSession:
    session: ConsoleSession = connection.scope["state"]["console_session"]
    return session


async def _console(connection: HTTPConnection) -> Console:
    console: Console = connection.app.state.console
    return console


Operator = Annotated[Principal, Depends(_operator)]
OperatorSession = Annotated[ConsoleSession, Depends(_operator_session)]
ConsoleState = Annotated[Console, Depends(_console)]
