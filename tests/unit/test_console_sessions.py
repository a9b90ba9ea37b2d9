"""Console sessions and pending logins: opaque ids, TTL, bounds, take-once (pure, no I/O)."""

from __future__ import annotations

import secrets

import pytest

from mesh.console_sessions import ConsoleSessions, PendingLogin, PendingLogins
from mesh.errors import QuotaExceeded
from tests.unit.helpers import T0, later


def test_a_session_id_is_opaque_random_and_not_kept() -> None:
    sessions = ConsoleSessions(ttl_s=60, capacity=10)
    token, session = sessions.open("agent-1", "alice", T0, secrets.token_urlsafe(32))
    other, _ = sessions.open("agent-1", "alice", T0, secrets.token_urlsafe(32))
    assert token != other and len(token) >= 43  # 256 bits, url-safe base64
    assert "agent-1" not in token and "alice" not in token
    assert session.expires_at == later(60) and session.created_at == T0
    assert token not in repr(sessions._map._entries)  # only digests are stored
    assert sessions.get(token, later(1)) == session


def test_sessions_expire_and_unknown_ids_find_nothing() -> None:
    sessions = ConsoleSessions(ttl_s=60, capacity=10)
    token, _ = sessions.open("a", "s", T0, secrets.token_urlsafe(32))
    assert sessions.get(token, later(59.9)) is not None
    assert sessions.get(token, later(60)) is None
    assert len(sessions) == 0  # an expired entry found on lookup is removed
    for wrong in (None, "", "x" * 300, token + "x"):
        assert sessions.get(wrong, T0) is None


def test_drop_is_idempotent() -> None:
    sessions = ConsoleSessions(ttl_s=60, capacity=10)
    token, _ = sessions.open("a", "s", T0, secrets.token_urlsafe(32))
    assert sessions.drop(token, later(1)) is True
    assert sessions.drop(token, later(1)) is False
    assert sessions.drop(None, later(1)) is False
    assert sessions.get(token, later(1)) is None


def test_the_count_is_bounded_and_the_oldest_goes_first() -> None:
    sessions = ConsoleSessions(ttl_s=60, capacity=3)
    tokens = [sessions.open("a", f"s{i}", later(i), secrets.token_urlsafe(32))[0] for i in range(5)]
    assert len(sessions) == 3
    assert [sessions.get(t, later(5)) is not None for t in tokens] == [False, False, True, True, True]


def test_expired_entries_are_purged_on_insert() -> None:
    sessions = ConsoleSessions(ttl_s=10, capacity=100)
    for i in range(50):
        sessions.open("a", "s", later(i * 0.1), secrets.token_urlsafe(32))
    sessions.open("a", "s", later(100), secrets.token_urlsafe(32))
    assert len(sessions) == 1


def test_a_pending_login_is_taken_once() -> None:
    pending = PendingLogins(ttl_s=600, capacity=10)
    login = PendingLogin(nonce="n", code_verifier="v", redirect_uri="http://127.0.0.1/admin/auth/callback")
    assert pending.put("state-1", login, T0) == later(600)
    assert pending.take("state-2", later(1)) is None
    assert pending.take("state-1", later(1)) == login
    assert pending.take("state-1", later(1)) is None  # a replayed callback finds nothing
    pending.put("state-3", login, T0)
    assert pending.take("state-3", later(600)) is None  # expired
    assert pending.take(None, T0) is None


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        ConsoleSessions(ttl_s=0, capacity=1)
    with pytest.raises(ValueError):
        PendingLogins(ttl_s=1, capacity=0)


def test_a_full_pending_table_refuses_new_logins_instead_of_dropping_old_ones() -> None:
    pending = PendingLogins(ttl_s=600, capacity=2)
    login = PendingLogin("nonce", "verifier", "http://memesh.test/admin/auth/callback")
    pending.put("first", login, T0)
    pending.put("second", login, T0)
    with pytest.raises(QuotaExceeded):
        pending.put("flood", login, later(1))
    assert pending.take("first", later(2)) == login  # a real operator's login survived the flood
    pending.put("third", login, later(3))  # room again once one was taken
    assert pending.take("third", later(604)) is None  # expired (put at 3 s, 600 s to live)
    pending.put("fourth", login, later(700))  # expired entries free their place


async def test_the_console_state_actor_draws_each_session_id_afresh() -> None:
    """The ids the rules above store come from the ConsoleState actor: 256 random bits, never the same twice."""
    from actors.console_state import ConsoleState, ConsoleStateConfig

    state = ConsoleState(ConsoleStateConfig(session_ttl_s=60, max_sessions=100))
    tokens = set()
    for _ in range(20):
        tokens.add((await state.open_session("agent-1", "alice", T0))[0])
    assert len(tokens) == 20 and all(len(t) >= 43 and "alice" not in t for t in tokens)
    for token in tokens:
        assert await state.session(token, later(1)) is not None
