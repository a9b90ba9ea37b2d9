"""The A2A SDK's server pieces, bound to memesh: who the caller is, what a message asks, the reply.

Guarantees:
- The caller of every JSON-RPC call is the principal the door admitted
  (:class:`Caller`, built by :class:`CallerContext` from the request's
  state); nothing in a message names an identity. The caller's key is
  removed from the headers the SDK keeps in its call context.
- Tasks belong to the agent that made them (:func:`owner_of`, the task
  store's owner resolver; it refuses to resolve a call without a caller),
  and memesh makes none: every operation answers at once with a ``Message``.
  ``GetTask``, ``ListTasks`` and ``CancelTask`` therefore find nothing, for
  any caller, and a message naming a ``taskId`` is ``TaskNotFound``.
- A message asks for one operation (:func:`operation_of`): its data part
  ``{"op": ..., ...}``, or, with no data part, its text parts as a recall.
  Anything else (two data parts, an unknown op, a bad argument, no text) is
  the JSON-RPC ``-32602`` invalid-params error with each problem named
  (``google.rpc.BadRequest`` field violations), raised before the SDK sets
  up any task, so nothing is stored and nothing runs; such a refused message
  still costs its caller one Read token.
- The reply is one data part: ``{"op", "result"}`` (``scope`` too for the
  reads) on success, the spec's envelope ``{"error": {"code", "message"}}``
  when the operation is refused (a rate limit says when to retry in its
  message). Nothing the use case raises escapes as a JSON-RPC error.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from a2a.auth.user import UnauthenticatedUser, User
from a2a.helpers.proto_helpers import get_data_parts, get_text_parts, new_data_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import DefaultServerCallContextBuilder
from a2a.server.tasks import TaskStore
from a2a.types.a2a_pb2 import AgentCard, Message, SendMessageRequest, Task
from a2a.utils.errors import A2AError, InvalidParamsError, TaskNotCancelableError
from starlette.requests import Request

from api.a2a.operations import InvalidArguments, Operation, parse_operation, recall_text
from api.admission import KEY_HEADER
from api.errors import envelope
from head.facade import Bucket, Memesh
from mesh.errors import ErrorCode, InternalError, MemeshError, RateLimited, Unauthorized
from mesh.identity import Principal

log = logging.getLogger(__name__)

OPERATION = "memesh.operation"  # the call context's state key for the parsed operation
_CREDENTIAL_HEADERS = (KEY_HEADER, "authorization")


class Caller(User):
    """The admitted principal, as the SDK's user (its name is the agent id)."""

    def __init__(self, principal: Principal) -> None:
        self.principal = principal

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self.principal.agent_id


class CallerContext(DefaultServerCallContextBuilder):
    """The SDK's call context, with the door's principal as its user and no credential in its headers."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        headers = context.state.get("headers", {})
        for name in _CREDENTIAL_HEADERS:
            headers.pop(name, None)
        return context

    def build_user(self, request: Request) -> User:
        principal = request.scope.get("state", {}).get("principal")
        return Caller(principal) if isinstance(principal, Principal) else UnauthenticatedUser()


def owner_of(context: ServerCallContext) -> str:
    """The task store's owner of a call: its agent. A call without a caller has no owner (refused)."""
    if not isinstance(context.user, Caller):
        raise Unauthorized("an A2A call needs an admitted caller")
    return f"{context.user.principal.tenant_id}/{context.user.principal.agent_id}"


def operation_of(message: Message) -> Operation:
    """The one operation ``message`` asks for; InvalidParamsError (-32602) when it asks for none."""
    data = get_data_parts(message.parts)
    try:
        if len(data) > 1:
            raise InvalidArguments([("parts", "send one data part (one operation) per message")])
        if data:
            return parse_operation(data[0])
        text = "\n".join(get_text_parts(message.parts)).strip()
        if not text:
            raise InvalidArguments([("parts", 'send a data part {"op": ...} or text to recall')])
        return recall_text(text)
    except InvalidArguments as exc:
        violations = [{"field": field, "message": problem} for field, problem in exc.fields]
        raise InvalidParamsError(message=f"validation: {exc}", data={"errors": violations}) from None


def refusal(exc: MemeshError) -> dict[str, Any]:
    """The spec's envelope for a refused operation; a rate limit says when to retry."""
    message = f"{exc.message}; retry in {exc.retry_after} s" if isinstance(exc, RateLimited) else exc.message
    return envelope(exc.code, message)


class MemeshExecutor(AgentExecutor):
    """Runs the operation the handler parsed, as the call's caller, and enqueues the one reply message."""

    def __init__(self, memesh: Memesh) -> None:
        self.memesh = memesh

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        call = context.call_context
        operation = call.state.get(OPERATION)
        reply: dict[str, Any]
        try:
            if not isinstance(call.user, Caller):
                raise Unauthorized("an A2A call needs an admitted caller")
            if not isinstance(operation, Operation):
                raise InternalError("the message's operation was not read")
            reply = await operation.run(self.memesh, call.user.principal)
        except MemeshError as exc:
            reply = refusal(exc)
        except Exception:  # a defect must not become a stored FAILED task: answer like REST's 500
            log.exception("A2A operation failed")
            reply = envelope(ErrorCode.INTERNAL, "internal error")
        await event_queue.enqueue_event(new_data_message(reply, media_type="application/json", context_id=context.context_id))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise TaskNotCancelableError  # there is never a running task to cancel


class MemeshRequestHandler(DefaultRequestHandler):
    """The SDK's handler over :class:`MemeshExecutor`, reading a message's operation before it sets up
    any task. A message refused before its operation runs (an A2A error: invalid params, an unknown
    ``taskId``) costs its caller one Read token, so refusals cannot be sent without bound either."""

    def __init__(self, memesh: Memesh, task_store: TaskStore, agent_card: AgentCard) -> None:
        super().__init__(agent_executor=MemeshExecutor(memesh), task_store=task_store, agent_card=agent_card)
        self.memesh = memesh

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Message | Task:
        try:
            context.state[OPERATION] = operation_of(params.message)
            reply: Message | Task = await super().on_message_send(params, context)
        except A2AError:
            if isinstance(context.user, Caller):
                with contextlib.suppress(RateLimited):  # refused either way
                    self.memesh.charge(context.user.principal, Bucket.READ)
            raise
        return reply
