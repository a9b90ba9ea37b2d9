"""Token buckets, per caller and class; the clock is a parameter."""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

from mesh.errors import RateLimited


@dataclass(frozen=True, slots=True)
class BucketPolicy:
    """``rate`` tokens per second refill a bucket of ``burst`` tokens; rate 0 disables the bucket."""

    rate: float
    burst: float


class TokenBuckets:
    """Guarantees:
    - A charge that would take a bucket below zero raises :class:`RateLimited`
      with the whole seconds until enough tokens are back, and takes nothing.
      A charge costs at most ``burst`` (a batch larger than the burst waits for
      a full bucket rather than never fitting).
    - ``share`` scales a policy's rate and burst: with several heads, each
      holds its share of the limit (1 / heads), so the shares sum to it.
    - Memory is bounded by ``max_keys`` buckets. Past it, the buckets used least
      recently are forgotten first, so callers that keep coming back (and any
      caller that was just refused) keep their state; a flood of new callers
      cannot reset anyone else's limits.
    """

    def __init__(self, policies: dict[str, BucketPolicy], max_keys: int = 100_000) -> None:
        self._policies = policies
        self._state: OrderedDict[tuple[str, str], tuple[float, float]] = OrderedDict()
        self._max_keys = max_keys

    def charge(self, bucket: str, caller: str, now: float, cost: float = 1.0, share: float = 1.0) -> None:
        policy = self._scaled(bucket, share)
        if policy is None:
            return
        cost = min(cost, policy.burst)
        key = (bucket, caller)
        tokens, last = self._state.get(key, (policy.burst, now))
        tokens = min(policy.burst, tokens + max(0.0, now - last) * policy.rate)
        if tokens < cost:
            self._keep(key, tokens, now)
            wait = (cost - tokens) / policy.rate
            raise RateLimited(f"rate limit of the {bucket} bucket reached", retry_after=max(1, math.ceil(wait)))
        self._keep(key, tokens - cost, now)

    def require(self, bucket: str, caller: str, now: float, share: float = 1.0) -> None:
        """RateLimited when the caller's bucket holds less than one token; takes nothing."""
        policy = self._scaled(bucket, share)
        state = self._state.get((bucket, caller))
        if policy is None or state is None:
            return
        tokens = min(policy.burst, state[0] + max(0.0, now - state[1]) * policy.rate)
        if tokens < 1.0:
            raise RateLimited(
                f"rate limit of the {bucket} bucket reached", retry_after=max(1, math.ceil((1.0 - tokens) / policy.rate))
            )

    def _scaled(self, bucket: str, share: float) -> BucketPolicy | None:
        policy = self._policies.get(bucket)
        if policy is None or policy.rate <= 0:
            return None
        if share >= 1.0:
            return policy
        return BucketPolicy(policy.rate * share, max(1.0, policy.burst * share))

    def _keep(self, key: tuple[str, str], tokens: float, now: float) -> None:
        self._state[key] = (tokens, now)
        self._state.move_to_end(key)
        while len(self._state) > self._max_keys:
            self._state.popitem(last=False)

    def __len__(self) -> int:
        return len(self._state)
