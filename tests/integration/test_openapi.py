"""What upstream kubectl reads from the apiserver's schemas and defaults: ``kubectl explain`` walks the
OpenAPI v3 documents generated from the resource table, and ``kubectl debug`` relies on a pod's defaulted
spec (it dereferences ``securityContext``) and on upstream's 404 body."""

from __future__ import annotations

import json

import pytest

from daemons.api.resources import RESOURCES
from tests.conftest import Kubectl

pytestmark = pytest.mark.integration


def test_every_kind_has_a_schema_in_its_group_versions_document(api):
    """The v3 index points at one document per group version, and each carries its kinds' schemas."""
    index = api.request("GET", "/openapi/v3")["paths"]
    for resource in RESOURCES:
        path = resource.api_prefix.lstrip("/")
        document = api.request("GET", index[path]["serverRelativeURL"])
        schemas = document["components"]["schemas"]
        gvk = {"group": resource.group, "version": resource.version, "kind": resource.kind}
        marked = [name for name, schema in schemas.items() if gvk in schema.get("x-kubernetes-group-version-kind", [])]
        assert len(marked) == 1, f"{resource.kind}: {marked}"
        schema = schemas[marked[0]]
        assert {"apiVersion", "kind", "metadata"} <= set(schema["properties"]), resource.kind
        assert schema["properties"]["metadata"] == {"$ref": "#/components/schemas/ObjectMeta"}
        assert "ObjectMeta" in schemas


def test_openapi_v2_json_carries_every_kinds_definition(api):
    """JSON unless protobuf is asked for: kubectl 1.27 asks for protobuf before each create (as below)."""
    document = api.request("GET", "/openapi/v2")
    assert document["swagger"] == "2.0"
    deployment = document["definitions"]["Deployment"]
    assert deployment["x-kubernetes-group-version-kind"] == [{"group": "apps", "kind": "Deployment",
                                                              "version": "v1"}]
    assert deployment["properties"]["spec"] == {"$ref": "#/definitions/DeploymentSpec"}


@pytest.mark.parametrize(("field", "expected"), [
    ("pod.spec.containers", ("image", "imagePullPolicy", "livenessProbe", "ports", "resources")),
    ("deployment.spec.strategy", ("rollingUpdate", "type")),
])
def test_explain_prints_a_fields_fields(kubectl: Kubectl, field: str, expected: tuple[str, ...]):
    output = kubectl("explain", field)
    fields = {line.split()[0] for line in output.splitlines() if line.startswith("  ") and line.split()}
    assert set(expected) <= fields, output


def test_explain_recursive_prints_nested_fields(kubectl: Kubectl):
    output = kubectl("explain", "service", "--recursive")
    assert "KIND:" in output and "Service" in output, output
    words = set(output.split())
    assert {"metadata", "labels", "spec", "ports", "targetPort", "selector", "clusterIP", "sessionAffinity"} <= words, \
        output


def test_kubectl_debug_gets_past_the_pods_security_context(kubectl: Kubectl):
    """kubectl debug reads the pod's securityContext, which the apiserver's defaults always fill, and the
    details of the 404 the unserved ephemeralcontainers subresource answers; it then fails cleanly."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "target"},
           "spec": {"containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}}
    kubectl("create", "-f", "-", stdin=json.dumps(pod))
    result = kubectl.run("debug", "target", "--image=busybox", "--attach=false")
    output = result.stdout + result.stderr
    assert "panic" not in output and "nil pointer" not in output, output
