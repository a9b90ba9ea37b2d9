"""memesh-client: the Python client of memesh: sync :class:`Memesh`, async
:class:`AsyncMemesh` with the inbox stream, typed models and typed errors."""

from memesh_client._ops import cell
from memesh_client._transport import RetryPolicy
from memesh_client.aio import AsyncMemesh, InboxStream
from memesh_client.client import Memesh
from memesh_client.errors import (
    Conflict,
    ConnectionFailed,
    DimensionMismatch,
    Forbidden,
    MemeshError,
    NotFound,
    QuotaExceeded,
    RateLimited,
    ServiceFailed,
    StorageUnavailable,
    TimedOut,
    TransactionFailed,
    Unauthorized,
    Unavailable,
    UnreadableAnswer,
    ValidationFailed,
)
from memesh_client.models import CellPage, InboxItem, Node, PullPage, Scene, ScenePage

__all__ = [
    "AsyncMemesh",
    "CellPage",
    "Conflict",
    "ConnectionFailed",
    "DimensionMismatch",
    "Forbidden",
    "InboxItem",
    "InboxStream",
    "Memesh",
    "MemeshError",
    "Node",
    "NotFound",
    "PullPage",
    "QuotaExceeded",
    "RateLimited",
    "RetryPolicy",
    "Scene",
    "ScenePage",
    "ServiceFailed",
    "StorageUnavailable",
    "TimedOut",
    "TransactionFailed",
    "Unauthorized",
    "Unavailable",
    "UnreadableAnswer",
    "ValidationFailed",
    "cell",
]
