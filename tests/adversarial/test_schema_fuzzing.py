"""Schema fuzzing of /v1 with schemathesis against a running ``memesh serve``.

The fuzzing phase sends schema-conforming and schema-breaking bodies, paths and
headers to every operation of ``/openapi.json``; the stateful phase chains
operations along the document's links (a written cell's scene, an opened
session, a placed beacon). Every check schemathesis has runs, except
``positive_data_acceptance``: the document states the deployment's limits
(``api/data/documented_limits.py``, checked bound by bound in
``tests/unit/test_openapi_limits.py``), but no schema can say "a cursor this
service issued" or "an ``expires_at`` in the future", so a few schema-valid
requests are rightly refused. No 5xx, and every status, content type, header
(``Allow`` included) and body matches the document. Then the server is
restarted on whatever the fuzzer left behind, and must come back and serve.
Bounded: 40 examples an operation, a fixed seed, one worker.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers import Server

LIMITS = {f"MEMESH_RATE_LIMITS__{b}__{k}": "100000" for b in ("READ", "WRITE", "INBOX") for k in ("RATE", "BURST")}


@pytest.mark.timeout(600)  # 2.5 to 3.5 minutes of real servers here: the suite's 300 s hang guard is too close
def test_fuzz_and_stateful_phases_find_no_5xx_and_no_departure_from_the_document(ray_address: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = Server(data, ray_address, "hash", LIMITS).start()
    key = server.issue("fuzz", "Writer", "fuzzer")["plaintext_secret"]
    command = [
        str(Path(sys.executable).parent / "st"),
        "run",
        f"{server.base_url}/openapi.json",
        "--header",
        f"x-service-key: {key}",
        "--phases",
        "fuzzing,stateful",
        "--max-examples",
        "40",
        "--seed",
        "7",
        "--workers",
        "1",
        "--checks",
        "all",
        "--exclude-checks",
        "positive_data_acceptance",
        "--no-shrink",
        "--request-timeout",
        "30",
    ]
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
        assert "passed" in run.stdout and " failed" not in run.stdout
        assert " ERROR " not in server.output(), server.output()[-3000:]  # no 5xx was logged either
    finally:
        assert server.stop(signal.SIGTERM) == 0
    again = Server(data, ray_address, "hash").start()  # whatever the fuzzer stored, the next start loads it
    try:
        with again.http(key) as http:
            assert http.post("/v1/cells", json={"content": "after the fuzzer", "cell_type": "Fact"}).status_code == 201
        assert "skipped an undecodable" not in again.output()
    finally:
        again.stop()
