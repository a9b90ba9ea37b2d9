"""Token buckets, per caller and class; the clock is a parameter."""

from __future__ import annotations

import math
from dataclasses import dataclass

from mesh.errors import RateLimited


@dataclass(frozen=True, slots=True)
class BucketPolicy:
    """``rate`` tokens per second refill a bucket of ``burst`` tokens; rate 0 disables the bucket."""

    rate: float
    burst: float


class TokenBuckets:
    """Guarantee: a charge that would take a bucket below zero raises
    :class:`RateLimited` with the whole seconds until one token is back, and
    takes nothing."""

    def __init__(self, policies: dict[str, BucketPolicy], max_keys: int = 100_000) -> None:
        self._policies = policies
        self._state: dict[tuple[str, str], tuple[float, float]] = {}
        self._max_keys = max_keys

    def charge(self, bucket: str, caller: str, now: float, cost: float = 1.0) -> None:
        policy = self._policies.get(bucket)
        if policy is None or policy.rate <= 0:
            return
        key = (bucket, caller)
        tokens, last = self._state.get(key, (policy.burst, now))
        tokens = min(policy.burst, tokens + max(0.0, now - last) * policy.rate)
        if tokens < cost:
            wait = (cost - tokens) / policy.rate
            self._state[key] = (tokens, now)
            raise RateLimited(f"rate limit of the {bucket} bucket reached", retry_after=max(1, math.ceil(wait)))
        if len(self._state) >= self._max_keys and key not in self._state:
            self._state.clear()  # bounded memory: full buckets are the default state anyway
        self._state[key] = (tokens - cost, now)
