"""The launch files in ``cluster/`` are what their tools accept.

``ray-cluster.yaml`` goes through the Ray cluster launcher's own preparation and
schema (``prepare_config`` then ``validate_config``, what ``ray up`` runs before
anything else). ``kuberay.yaml`` is validated strictly, as ``kubectl apply
--validate=strict`` would: its core objects against the Kubernetes API schemas
that ``kubernetes-validate`` ships, its ``RayCluster`` against the CRD schema of
KubeRay v1.7.0 (``tests/schemas/kuberay-v1.7.0-raycluster-v1.json.gz``: the
``v1`` ``openAPIV3Schema`` of ``ray-operator/config/crd/bases/ray.io_rayclusters.yaml``,
Apache-2.0), with unknown fields refused.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

CLUSTER = Path(__file__).resolve().parents[2] / "cluster"
SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
KUBERNETES = "1.30.0"  # the oldest Kubernetes KubeRay v1.7 supports


def _strict(schema: Any) -> Any:
    """The CRD schema with unknown fields refused, as strict server-side validation does.

    A structural schema prunes unknown fields silently; every object that lists
    its properties and neither declares ``additionalProperties`` nor preserves
    unknown fields gets ``additionalProperties: false``.
    """
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _strict(value) for key, value in schema.items()}
    if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def _raycluster_validator() -> jsonschema.Draft7Validator:
    schema = json.loads(gzip.decompress((SCHEMAS / "kuberay-v1.7.0-raycluster-v1.json.gz").read_bytes()))
    return jsonschema.Draft7Validator(_strict(schema))


def _kuberay_docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((CLUSTER / "kuberay.yaml").read_text()) if d]


def test_the_ray_cluster_launcher_accepts_ray_cluster_yaml() -> None:
    config = prepare_config(yaml.safe_load((CLUSTER / "ray-cluster.yaml").read_text()))
    validate_config(config)  # raises jsonschema.ValidationError on any field the launcher does not know
    assert config["provider"]["type"] == "local"
    node_types = config["available_node_types"]
    assert sum(t["min_workers"] for t in node_types.values()) == len(config["provider"]["worker_ips"])
    assert any("memesh serve" in c for c in config["head_start_ray_commands"])


def test_kuberay_yaml_core_objects_match_the_kubernetes_schemas() -> None:
    core = [d for d in _kuberay_docs() if d["apiVersion"] != "ray.io/v1"]
    assert {d["kind"] for d in core} == {"PersistentVolumeClaim", "Service"}
    for doc in core:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def test_kuberay_yaml_raycluster_matches_the_kuberay_crd_schema() -> None:
    (cluster,) = (d for d in _kuberay_docs() if d["kind"] == "RayCluster")
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in _raycluster_validator().iter_errors(cluster)]
    assert errors == []


@pytest.mark.parametrize(
    ("where", "field"),
    [
        (("spec",), "headGroupSpecs"),  # a misspelled top-level field
        (("spec", "headGroupSpec", "template", "spec", "containers", 0), "envFromm"),  # deep in the pod template
        (("spec", "workerGroupSpecs", 1), "replica"),
    ],
)
def test_the_crd_check_refuses_a_misspelled_field(where: tuple[Any, ...], field: str) -> None:
    (cluster,) = (d for d in _kuberay_docs() if d["kind"] == "RayCluster")
    broken = copy.deepcopy(cluster)
    node = broken
    for key in where:
        node = node[key]
    node[field] = node.get(field, 1)
    assert not _raycluster_validator().is_valid(broken)


def test_a_core_object_with_a_misspelled_field_is_refused() -> None:
    (service,) = (d for d in _kuberay_docs() if d["kind"] == "Service")
    broken = copy.deepcopy(service)
    broken["spec"]["selectr"] = broken["spec"]["selector"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES, strict=True)


def test_kuberay_yaml_runs_memesh_heads_behind_one_service() -> None:
    docs = _kuberay_docs()
    kinds = {d["kind"] for d in docs}
    assert {"RayCluster", "Service"} <= kinds
    for doc in docs:
        assert doc["apiVersion"] and doc["metadata"]["name"]
    (cluster,) = (d for d in docs if d["kind"] == "RayCluster")
    assert cluster["apiVersion"] == "ray.io/v1"
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"]
    assert any("memesh serve" in str(container) for container in head), "the head pod does not run memesh serve"
    (heads,) = (g for g in cluster["spec"]["workerGroupSpecs"] if g["groupName"] == "heads")
    assert any("memesh serve" in str(c) for c in heads["template"]["spec"]["containers"])
    (service,) = (d for d in docs if d["kind"] == "Service")
    selector = service["spec"]["selector"]
    for template in (cluster["spec"]["headGroupSpec"]["template"], heads["template"]):
        assert selector.items() - {"ray.io/cluster": "memesh"}.items() <= template["metadata"]["labels"].items()
        env = {e["name"]: e.get("value") for e in template["spec"]["containers"][0]["env"]}
        assert env["MEMESH_RAY__DETACHED"] == "true", "several heads need actors that outlive any one head"
