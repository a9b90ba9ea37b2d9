"""memesh with its tables in an S3-compatible object store: a real moto S3 server on loopback (the
``moto[server]`` package; it speaks the S3 REST protocol LanceDB's object store client uses, as MinIO or
AWS S3 would). The endpoint and credentials travel in ``storage.options``, so actors in Ray worker
processes reach the store without any environment set on the nodes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.servers import Server, free_port

BUCKET = "memesh-e2e"


@pytest.fixture
def s3_endpoint(tmp_path: Path) -> Iterator[str]:
    """A moto S3 server in its own process, with one empty bucket."""
    port = free_port()
    log = (tmp_path / "moto.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(endpoint, timeout=2)
                break
            except httpx.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "moto.log").read_text()
                time.sleep(0.2)
        s3_client(endpoint).create_bucket(Bucket=BUCKET)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def s3_client(endpoint: str) -> Any:
    import boto3

    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    )


def stored_keys(endpoint: str) -> list[str]:
    s3 = s3_client(endpoint)
    keys: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        keys += [item["Key"] for item in page.get("Contents", [])]
    return keys


def test_cells_beacons_and_cursors_live_in_the_object_store_across_a_restart(
    ray_address: str, tmp_path: Path, s3_endpoint: str
) -> None:
    options = {
        "aws_endpoint": s3_endpoint,
        "aws_access_key_id": "test",
        "aws_secret_access_key": "test",
        "aws_region": "us-east-1",
        "allow_http": "true",
    }
    env = {"MEMESH_STORAGE__URI": f"s3://{BUCKET}/deployment/lance", "MEMESH_STORAGE__OPTIONS": json.dumps(options)}
    data_dir = tmp_path / "head"
    server = Server(data_dir, ray_address, "hash", env).start()
    try:
        listener = server.issue("s3co", "Reader", "listener")["plaintext_secret"]
        writer = server.issue("s3co", "Writer", "writer")["plaintext_secret"]
        with server.http(listener) as http:
            assert http.post("/v1/beacons", json={"interest": "object store migration"}).status_code in (200, 201)
        written = {}
        with server.http(writer) as http:
            for i in range(5):
                content = f"the object store migration finished step {i}"
                response = http.post("/v1/cells", json={"content": content, "cell_type": "Fact"})
                assert response.status_code == 201, response.text
                written[response.json()["id"]] = content
        with server.http(listener) as http:
            deadline = time.monotonic() + 60
            while not (page := http.post("/v1/inbox:pull", json={}).json())["items"]:
                assert time.monotonic() < deadline, "no delivery reached the listener"
                time.sleep(0.2)
            acked = page["items"][0]["delivery_seq"]
            assert http.post("/v1/inbox:pull", json={"ack": acked}).json()["cursor"] == acked
    finally:
        assert server.stop() == 0, server.output()[-3000:]

    keys = stored_keys(s3_endpoint)
    assert any(k.startswith("deployment/lance/") and "cells" in k for k in keys), keys[:20]
    assert not (data_dir / "lance").exists(), "tables were written to the head's disk, not the object store"

    again = Server(data_dir, ray_address, "hash", env).start()
    try:
        with again.http(writer) as http:
            for cell_id, content in written.items():
                found = http.post("/v1/recall", json={"text": content, "k": 3})
                assert found.status_code == 200 and cell_id in found.text, found.text
        with again.http(listener) as http:
            assert http.post("/v1/inbox:pull", json={}).json()["cursor"] == acked
        with again.http(writer) as http:  # the beacon was reloaded from the store: a new write still reaches it
            late = http.post("/v1/cells", json={"content": "object store migration step 9", "cell_type": "Fact"})
            assert late.status_code == 201, late.text
        with again.http(listener) as http:
            deadline = time.monotonic() + 60
            while "step 9" not in http.post("/v1/inbox:pull", json={}).text:
                assert time.monotonic() < deadline, "the reloaded beacon never received the new write"
                time.sleep(0.2)
    finally:
        again.stop()
