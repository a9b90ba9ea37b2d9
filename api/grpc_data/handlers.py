"""Rewrapping a gRPC method handler, for the server interceptors that act on every unary-request call
(:mod:`api.grpc_data.call_metrics`, :mod:`api.grpc_data.undecodable`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

Behaviour = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


def rewrapped(handler: Any, wrap: Callable[[Behaviour], Behaviour], deserializer: Callable[[bytes], Any] | None = None) -> Any:
    """``handler`` with its behaviour wrapped by ``wrap`` (and its request deserializer replaced, when one is
    given) if its request is unary; a handler of a streaming request is returned as it is."""
    decode = deserializer or handler.request_deserializer
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(wrap(handler.unary_unary), decode, handler.response_serializer)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(wrap(handler.unary_stream), decode, handler.response_serializer)
    return handler
