"""The launch files in ``cluster/`` are what their tools accept.

``ray-cluster.yaml`` goes through the Ray cluster launcher's own preparation and
schema (``prepare_config`` then ``validate_config``, what ``ray up`` runs before
anything else). ``kuberay.yaml`` is only checked to be well-formed Kubernetes
objects here: the RayCluster CRD schema is not shipped in any package this
project installs, so its fields are not validated against it.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

CLUSTER = Path(__file__).resolve().parents[2] / "cluster"


def test_the_ray_cluster_launcher_accepts_ray_cluster_yaml() -> None:
    config = prepare_config(yaml.safe_load((CLUSTER / "ray-cluster.yaml").read_text()))
    validate_config(config)  # raises jsonschema.ValidationError on any field the launcher does not know
    assert config["provider"]["type"] == "local"
    node_types = config["available_node_types"]
    assert sum(t["min_workers"] for t in node_types.values()) == len(config["provider"]["worker_ips"])
    assert any("memesh serve" in c for c in config["head_start_ray_commands"])


def test_kuberay_yaml_is_well_formed_kubernetes_objects() -> None:
    docs = [d for d in yaml.safe_load_all((CLUSTER / "kuberay.yaml").read_text()) if d]
    kinds = {d["kind"] for d in docs}
    assert {"RayCluster", "Service"} <= kinds
    for doc in docs:
        assert doc["apiVersion"] and doc["metadata"]["name"]
    (cluster,) = (d for d in docs if d["kind"] == "RayCluster")
    assert cluster["apiVersion"] == "ray.io/v1"
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"]
    assert any("memesh serve" in str(container) for container in head), "the head pod does not run memesh serve"
