"""A minimal inbox client: drain with acknowledgements (the example of docs/inbox.md).

Usage, against a running server:

    .venv/bin/python docs/_scripts/inbox_client.py http://127.0.0.1:8080 KEY_FILE

It places no beacon and writes nothing: it drains the key's inbox once,
printing what it handles, and exits.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

Item = dict[str, Any]


class InboxDrainer:
    def __init__(self, base_url: str, key: str, handle: Callable[[Item], None]) -> None:
        self.http = httpx.Client(base_url=base_url, headers={"x-service-key": key}, timeout=30)
        self.handle = handle
        self.ack: int | None = None  # the acknowledgement the next pull carries
        self.seen: set[str] = set()  # diff ids handled: one diff can arrive as several deliveries

    def _pull(self, body: dict[str, int]) -> dict[str, Any]:
        while True:
            r = self.http.post("/v1/inbox:pull", json=body)
            if r.status_code == 429:  # the Inbox bucket is empty
                time.sleep(int(r.headers.get("Retry-After", "1")))
                continue
            r.raise_for_status()
            page: dict[str, Any] = r.json()
            return page

    def drain(self) -> bool:
        """Handle everything in the inbox. False when an item failed: it comes back next time."""
        while True:
            page = self._pull({} if self.ack is None else {"ack": self.ack})
            failed = []
            for item in page["items"]:  # highest delivery.score first: not sequence order
                diff_id = item["diff"]["id"]
                if diff_id in self.seen:
                    continue  # the same diff, delivered again (another node, or redelivery)
                try:
                    self.handle(item)
                except Exception:  # noqa: BLE001 - any failure leaves the item unacknowledged
                    failed.append(item["delivery_seq"])
                else:
                    self.seen.add(diff_id)
            if failed:
                # Everything below the first failure is handled; it and all above it come back.
                self.ack = min(failed) - 1
                return False
            # Every item of the window is handled (deliveries outside your read scope
            # are in the window but never in items), so the whole window is acknowledged.
            self.ack = page["window_high"]
            if not page["has_more"] and page["window_high"] <= page["cursor"]:
                return True  # an empty window: every acknowledgement has been applied


if __name__ == "__main__":
    base_url, key_file = sys.argv[1], sys.argv[2]

    def show(item: Item) -> None:
        d = item["delivery"]
        print(f"#{item['delivery_seq']} score={d['score']} via {d['node_kind']}: {item['diff']['content'][:60]}")

    drainer = InboxDrainer(base_url, Path(key_file).read_text().strip(), show)
    print("drained" if drainer.drain() else "stopped at a failure", "- cursor acknowledged up to", drainer.ack)
