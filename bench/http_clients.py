"""The benchmarks' HTTP clients: lean ones, so the load generator's own CPU is not counted as the service's.

Every benchmark runs its clients on the same two cores as the server. ``httpx`` spends about 1 ms of CPU on
each request it sends (its own request and response models, h11's pure-Python parser): a sequential
``POST /v1/recall`` of the ``hash`` engine took 4.2 ms through ``httpx.Client`` and 3.5 ms through the
standard library's ``http.client``, and eight concurrent ``httpx.AsyncClient`` loops cost 1.0 ms of CPU a
request against aiohttp's 0.25 (docs/benchmarks.md, "The load generator's own CPU"). So:

- :class:`StdlibClient`, the standard library's ``http.client`` on one keep-alive connection, times lone
  requests (``bench.retrieval``);
- :class:`AiohttpClient`, aiohttp's client (its HTTP parser is C) on a pool of keep-alive connections, is
  the concurrent load (``bench.concurrency``, ``bench.writes``, ``bench.burst``).

Both answer with :class:`Answer`, which has the parts of ``httpx.Response`` the benchmarks read, so a
benchmark can still run on ``httpx`` (``--client httpx``) to hold a figure against the ones before.
"""

from __future__ import annotations

import http.client
import json as jsonlib
import select
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import aiohttp

Content = bytes | str | None
Headers = Mapping[str, str] | None

CLIENTS = ("lean", "httpx")  # what ``--client`` chooses from: lean (stdlib or aiohttp) or httpx


@dataclass(frozen=True)
class Answer:
    """A response read whole: what a benchmark checks of it."""

    status_code: int
    content: bytes
    headers: Mapping[str, str]

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return jsonlib.loads(self.content)

    def raise_for_status(self) -> None:
        if self.status_code >= 400:
            raise RuntimeError(f"answered {self.status_code}: {self.text[:300]}")


def _body(content: Content, json: Any) -> bytes:
    if json is not None:
        return jsonlib.dumps(json).encode()
    if isinstance(content, str):
        return content.encode()
    return content or b""


class StdlibClient:
    """One keep-alive connection through ``http.client`` (loopback, no proxies), carrying ``headers`` on
    every request. A connection the server closed while idle (its keep-alive timeout) is noticed before the
    next request and opened again, so a request is never sent into a closed socket."""

    def __init__(self, host: str, port: int, headers: Mapping[str, str], timeout_s: float = 120.0) -> None:
        self._connection = http.client.HTTPConnection(host, port, timeout=timeout_s)
        self._headers = dict(headers)

    def _fresh(self) -> None:
        sock = self._connection.sock
        if sock is not None and select.select([sock], [], [], 0)[0]:  # readable while idle: closed (or junk)
            self._connection.close()

    def request(self, method: str, path: str, content: Content = None, json: Any = None, headers: Headers = None) -> Answer:
        self._fresh()
        body = _body(content, json) if method in ("POST", "PUT", "PATCH") else None
        typed = {"content-type": "application/json"} if json is not None else {}  # as httpx and aiohttp do
        self._connection.request(method, path, body=body, headers={**self._headers, **typed, **(headers or {})})
        response = self._connection.getresponse()
        return Answer(response.status, response.read(), {k.lower(): v for k, v in response.getheaders()})

    def post(self, path: str, content: Content = None, json: Any = None, headers: Headers = None) -> Answer:
        return self.request("POST", path, content, json, headers)

    def get(self, path: str, headers: Headers = None) -> Answer:
        return self.request("GET", path, headers=headers)

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> StdlibClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.close()


class AiohttpClient:
    """aiohttp's client on at most ``connections`` keep-alive connections to ``base_url``, carrying
    ``headers`` on every request; use it as an async context manager."""

    def __init__(self, base_url: str, headers: Mapping[str, str], connections: int, timeout_s: float = 120.0) -> None:
        self._base_url = base_url
        self._headers = dict(headers)
        self._connections = connections
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> AiohttpClient:
        connector = aiohttp.TCPConnector(limit=self._connections, limit_per_host=self._connections)
        self._session = aiohttp.ClientSession(
            base_url=self._base_url, headers=self._headers, connector=connector, timeout=self._timeout, trust_env=False
        )
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        if self._session is not None:
            await self._session.close()

    async def request(self, method: str, path: str, content: Content = None, json: Any = None, headers: Headers = None) -> Answer:
        assert self._session is not None, "use the client as an async context manager"
        body = _body(content, json) if method in ("POST", "PUT", "PATCH") else None
        sent = dict(headers or {})
        if body is not None:
            sent.setdefault("content-type", "application/json")
        async with self._session.request(method, path, data=body, headers=sent) as response:
            return Answer(response.status, await response.read(), {k.lower(): v for k, v in response.headers.items()})

    async def post(self, path: str, content: Content = None, json: Any = None, headers: Headers = None) -> Answer:
        return await self.request("POST", path, content, json, headers)

    async def get(self, path: str, headers: Headers = None) -> Answer:
        return await self.request("GET", path, headers=headers)
