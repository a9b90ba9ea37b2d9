"""What both clients share about sending: headers, the answer's reading, and when to retry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from pydantic import ValidationError

from memesh_client._ops import Call
from memesh_client.errors import ConnectionFailed, MemeshError, TimedOut, UnreadableAnswer, error_of

T = TypeVar("T")
USER_AGENT = "memesh-client/0.1.0"


@dataclass(frozen=True)
class RetryPolicy:
    """A 429 (and a 503 that names a wait) is retried after the ``Retry-After`` the service sent, at most
    ``max_retries`` times and never waiting longer than ``max_wait_s`` at once (a longer wait raises at once).
    Nothing else is retried: a refused request changed nothing, any other answer may have."""

    max_retries: int = 3
    max_wait_s: float = 30.0


def headers(key: str) -> dict[str, str]:
    return {"x-service-key": key, "user-agent": USER_AGENT}


def request_args(call: Call[Any]) -> dict[str, Any]:
    args: dict[str, Any] = {"params": call.params or None}
    if call.json is not None or call.method == "POST":
        args["json"] = call.json if call.json is not None else {}
    return args


def read(call: Call[T], response: httpx.Response) -> T:
    """The parsed answer, or the typed error of a non-2xx one (UnreadableAnswer: a 2xx this client cannot read)."""
    if response.is_success:
        try:
            return call.parse(response.json() if response.content else None)
        except (ValueError, ValidationError, KeyError, TypeError) as exc:  # not JSON, or not the documented shape
            raise UnreadableAnswer(f"{call.method} {call.path}: {exc}", response.status_code) from exc
    try:
        body = response.json()
    except ValueError:
        body = None
    raise error_of(response.status_code, body, retry_after(response))


def no_answer(exc: httpx.TransportError) -> MemeshError:
    """What a request that got no answer raises: TimedOut when it was sent and the answer did not come in time
    (it may have been applied: retry a write only if doing it twice is harmless), ConnectionFailed when it
    never reached the service (nothing was applied)."""
    if isinstance(exc, httpx.ReadTimeout | httpx.WriteTimeout):
        return TimedOut(f"no answer in time ({type(exc).__name__}); the request may have been applied")
    return ConnectionFailed(f"{type(exc).__name__}: {exc}")


def next_cursor(sent: str | None, given: str) -> str:
    """The cursor of a listing's next page; UnreadableAnswer when the service handed back the one it was sent
    (a loop that would never end)."""
    if given == sent:
        raise UnreadableAnswer(f"the listing answered the cursor it was sent ({given!r}) as its next one")
    return given


def retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def wait_before_retry(error: MemeshError, attempt: int, policy: RetryPolicy) -> float | None:
    """Seconds to wait before attempt ``attempt + 1``, or None when ``error`` is final."""
    if attempt >= policy.max_retries or error.retry_after is None or error.retry_after > policy.max_wait_s:
        return None
    if error.status == 429 or error.status == 503:
        return error.retry_after
    return None
