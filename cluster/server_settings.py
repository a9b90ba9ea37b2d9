"""The ``[server]`` section of the settings: the three listeners (REST, the gRPC admin service, the gRPC
data plane), their TLS and their limits. Part of the one settings class, ``cluster.settings.Settings``."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, model_validator


class Section(BaseModel):
    """A section of the settings: unknown keys are refused, values never change after the start."""

    model_config = {"extra": "forbid", "frozen": True}


class ServerSettings(Section):
    host: str = "0.0.0.0"
    port: int = Field(8080, ge=0, le=65535)
    grpc_host: str = "127.0.0.1"
    grpc_port: int = Field(50051, ge=0, le=65535)
    grpc_enabled: bool = True
    grpc_data_enabled: bool = True  # the gRPC data plane, memesh.data.v1 (docs/grpc.md), on a listener of its own
    grpc_data_host: str = "0.0.0.0"  # faces agents, as REST's host does
    grpc_data_port: int = Field(50052, ge=0, le=65535)
    grpc_reflection: bool | None = None  # reflection on the data plane; None: on in the dev profile, off in production
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    request_timeout_s: float = Field(30.0, gt=0)
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    tls_certfile: Path | None = None  # serve REST over TLS (uvicorn ssl_certfile); both or neither
    tls_keyfile: Path | None = None
    grpc_tls_certfile: Path | None = None  # serve the gRPC admin service over TLS; both or neither
    grpc_tls_keyfile: Path | None = None
    metrics_token: SecretStr | None = None  # when set, GET /metrics needs "Authorization: Bearer <token>"
    health_cache_s: float = Field(1.0, ge=0, le=60)  # /healthz answers from one actor round at most this often
    event_loop: Literal["uvloop", "asyncio"] = "uvloop"  # the head's event loop (docs/configuration.md)

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerSettings:
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("server.tls_certfile and server.tls_keyfile go together")
        if (self.grpc_tls_certfile is None) != (self.grpc_tls_keyfile is None):
            raise ValueError("server.grpc_tls_certfile and server.grpc_tls_keyfile go together")
        ports = [("server.port", self.port)]
        ports += [("server.grpc_port", self.grpc_port)] if self.grpc_enabled else []
        ports += [("server.grpc_data_port", self.grpc_data_port)] if self.grpc_data_enabled else []
        taken: dict[int, str] = {}
        for name, port in ports:  # 0 asks the kernel for a port: never a clash
            if port and port in taken:
                raise ValueError(f"{name} and {taken[port]} are both {port}: each listener needs a port of its own")
            taken.setdefault(port, name)
        return self

    @property
    def tls(self) -> bool:
        return self.tls_certfile is not None

    @property
    def grpc_tls(self) -> bool:
        return self.grpc_tls_certfile is not None

    @property
    def grpc_loopback(self) -> bool:
        """True when the gRPC admin service listens on a loopback address only."""
        return _loopback(self.grpc_host)

    @property
    def grpc_data_loopback(self) -> bool:
        """True when the gRPC data plane listens on a loopback address only."""
        return _loopback(self.grpc_data_host)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
