"""The suite's shared servers (``tests/servers.py``): started once for consecutive files that use them,
stopped when the next test's file does not, started again if a later file asks (correct under any order).
A stand-in records starts and stops: what is tested is the bookkeeping, not a server."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.servers import SharedServers


class Recorded:
    def __init__(self, log: list[str], n: int) -> None:
        self.log, self.n = log, n
        log.append(f"start {n}")

    def stop(self) -> int:
        self.log.append(f"stop {self.n}")
        return 0


def test_a_shared_server_lives_across_consecutive_files_and_restarts_when_asked_again() -> None:
    shared, log = SharedServers(), list[str]()
    a, b, c = Path("a.py"), Path("b.py"), Path("c.py")
    shared.users = {"server": {a, b, c}}
    starts = iter(range(1, 10))

    def use(next_path: Path | None) -> Any:
        got = shared.acquire("server", lambda: Recorded(log, next(starts)))  # type: ignore[arg-type, return-value]
        shared.next_item = None if next_path is None else SimpleNamespace(path=next_path)  # type: ignore[assignment]
        shared.release("server")
        return got

    first = use(b)  # a's module ends; b uses it too
    assert use(Path("other.py")) is first  # b's module ends; the next file does not use it
    shared.users["server"].discard(Path("other.py"))
    assert use(None).n == 2  # c asks again after the stop: a fresh one; the run ends
    assert log == ["start 1", "stop 1", "start 2", "stop 2"]


def test_a_start_that_failed_is_not_tried_again() -> None:
    shared, starts = SharedServers(), list[int]()

    def broken() -> Any:
        starts.append(1)
        raise AssertionError("memesh serve not healthy")

    for _ in range(3):
        try:
            shared.acquire("server", broken)
        except AssertionError:
            pass
        else:
            raise AssertionError("a broken start was answered with a server")
    assert starts == [1]
