"""Generated bodies for every served kind: create, update and both patch flavours never answer 5xx.

Each example changes a valid object of the kind at a few paths (random JSON values, wrong types, removed
fields), then sends it as a create, as a full update of a stored object, as a merge patch and as a JSON patch.
Whatever the apiserver makes of it, the answer must be a 2xx or a 4xx: a 5xx is a bug in the apiserver.
"""

import contextlib
import copy
import ssl
import uuid
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemons.api.resources import RESOURCES, Resource

CONTAINERS = [{"name": "main", "image": "busybox"}]
TEMPLATE = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": CONTAINERS}}
SELECTOR = {"matchLabels": {"app": "web"}}
# A valid body for each kind, less apiVersion, kind and metadata.name (filled in per row).
BASES: dict[str, dict[str, Any]] = {
    "Namespace": {},
    "Pod": {"spec": {"containers": CONTAINERS}},
    "Node": {"spec": {}},
    "Service": {"spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]}},
    "Endpoints": {"subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]},
    "Event": {"involvedObject": {"kind": "Pod", "name": "web"}, "reason": "Started", "message": "started",
              "type": "Normal"},
    "Lease": {"spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}},
    "ReplicaSet": {"spec": {"replicas": 1, "selector": SELECTOR, "template": TEMPLATE}},
    "Deployment": {"spec": {"replicas": 1, "selector": SELECTOR, "template": TEMPLATE}},
    "DaemonSet": {"spec": {"selector": SELECTOR, "template": TEMPLATE}},
    "HorizontalPodAutoscaler": {"spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "minReplicas": 1,
        "maxReplicas": 3, "metrics": [{"type": "Resource", "resource": {
            "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]}},
    "DNS": {"spec": {"host": "fuzz.example.com", "paths": [{"path": "/", "serviceName": "target",
                                                           "servicePort": 80}]}},
    "Job": {"spec": {"template": {"spec": {"containers": CONTAINERS, "restartPolicy": "Never"}}}},
    "CronJob": {"spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {
        "spec": {"containers": CONTAINERS, "restartPolicy": "Never"}}}}}},
    "ConfigMap": {"data": {"k": "v"}},
    "Secret": {"data": {"k": "dg=="}},
    "ServiceAccount": {},
    "ReplicationController": {"spec": {"replicas": 1, "selector": {"app": "web"}, "template": TEMPLATE}},
    "EndpointSlice": {"addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"]}],
                      "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
}
# Objects a kind's valid body refers to, created first in the test's namespace.
PREREQUISITES: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "DNS": [("/api/v1/namespaces/{namespace}/services",
             {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "target"}, **BASES["Service"]})],
}

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, -1, 2**31, 2**63 - 1])
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
    | st.sampled_from(["", "a", "-", "web", "10.0.0.1", "1Gi", "TCP", "*", "..", "a" * 300]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=6,
)
REMOVE = object()
Path = tuple[str | int, ...]


def paths(value: Any, prefix: Path = ()) -> list[Path]:
    """Every path into ``value`` (dict keys and list indexes), the root excluded."""
    found: list[Path] = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found.append((*prefix, key))
        found.extend(paths(item, (*prefix, key)))
    return found


@st.composite
def mutations(draw: st.DrawFn, base: dict[str, Any]) -> list[tuple[Path, Any]]:
    """A few (path, value) changes: an existing path or a new key under one, set to a JSON value or removed."""
    known = paths(base)
    changes = []
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(known))
        if draw(st.booleans()):
            path = (*path[:-1], draw(st.sampled_from(["spec", "status", "metadata", "x", "name", "items"])))
        value = REMOVE if draw(st.integers(0, 5)) == 0 else draw(JSON_VALUES)
        changes.append((path, value))
    return changes


def mutated(base: dict[str, Any], changes: list[tuple[Path, Any]]) -> dict[str, Any]:
    """``base`` with ``changes`` applied where they still fit (an earlier change may have moved the path)."""
    body = copy.deepcopy(base)
    for path, value in changes:
        parent: Any = body
        for key in path[:-1]:
            fits = (isinstance(parent, dict) and key in parent) or (
                isinstance(parent, list) and isinstance(key, int) and key < len(parent))
            if not fits:
                break
            parent = parent[key]
        else:
            last = path[-1]
            if isinstance(parent, dict):
                if value is REMOVE:
                    parent.pop(last, None)
                else:
                    parent[str(last)] = value
            elif isinstance(parent, list) and isinstance(last, int) and last < len(parent):
                if value is REMOVE:
                    del parent[last]
                else:
                    parent[last] = value
    return body


def merge_patch(changes: list[tuple[Path, Any]]) -> dict[str, Any]:
    patch: dict[str, Any] = {}
    for path, value in changes:
        keys = [str(key) for key in path]
        node = patch
        for key in keys[:-1]:
            child = node.get(key)
            node = node.setdefault(key, {}) if isinstance(child, dict) or child is None else node
        node[keys[-1]] = None if value is REMOVE else value
    return patch


def json_patch(changes: list[tuple[Path, Any]]) -> list[dict[str, Any]]:
    def pointer(path: Path) -> str:
        return "".join("/" + str(key).replace("~", "~0").replace("/", "~1") for key in path)

    return [{"op": "remove", "path": pointer(path)} if value is REMOVE
            else {"op": "replace" if index % 2 else "add", "path": pointer(path), "value": value}
            for index, (path, value) in enumerate(changes)]


@pytest.fixture
def http(apiserver):
    with httpx.Client(base_url=apiserver.url, verify=ssl.create_default_context(cafile=apiserver.ca_file),
                      headers={"Authorization": f"Bearer {apiserver.admin_token}"}, timeout=60) as client:
        yield client


def collection(resource: Resource, namespace: str) -> str:
    prefix = f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"
    return f"{prefix}/namespaces/{namespace}/{resource.plural}" if resource.namespaced else \
        f"{prefix}/{resource.plural}"


def no_server_error(http: httpx.Client, method: str, url: str, body: Any, content_type: str = "application/json"
                    ) -> httpx.Response:
    """Send ``body``; fail on a 5xx. A connection the server closed after an earlier 5xx is retried once."""
    headers = {"Content-Type": content_type}
    try:
        answer = http.request(method, url, json=body, headers=headers)
    except httpx.RemoteProtocolError:
        answer = http.request(method, url, json=body, headers=headers)
    assert answer.status_code < 500, f"{method} {url} answered {answer.status_code}: {answer.text}\nbody: {body!r}"
    return answer


def remove(http: httpx.Client, resource: Resource, path: str) -> None:
    """Delete at once; a namespace, held until finalized, is finalized here as its controller would."""
    http.delete(path, params={"gracePeriodSeconds": "0"})
    if resource.kind == "Namespace":
        held = http.get(path)
        if held.status_code == 200:
            body = held.json()
            body["spec"] = {"finalizers": []}
            http.put(f"{path}/finalize", json=body)


@pytest.mark.parametrize("resource", RESOURCES, ids=[resource.kind for resource in RESOURCES])
def test_generated_bodies_never_get_a_server_error(http, namespace, resource):
    base = {"apiVersion": resource.api_version, "kind": resource.kind,
            "metadata": {"name": f"fuzz-{uuid.uuid4().hex[:8]}"}, **copy.deepcopy(BASES.get(resource.kind, {}))}
    for path, prerequisite in PREREQUISITES.get(resource.kind, []):
        assert http.post(path.format(namespace=namespace), json=prerequisite).status_code == 201
    path = collection(resource, namespace)
    stored = http.post(path, json=base)
    assert stored.status_code == 201, (f"the base {resource.kind} is not valid: add a valid one to BASES\n"
                                       f"{stored.text}")
    target = f"{path}/{base['metadata']['name']}"
    fresh = copy.deepcopy(base)
    fresh["metadata"]["name"] += "-new"
    created: set[str] = set()

    @settings(max_examples=8, derandomize=True, database=None, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(changes=mutations(base))
    def writes(changes):
        new = mutated(fresh, changes)
        answer = no_server_error(http, "POST", path, new)
        if answer.status_code == 201:
            name = answer.json()["metadata"]["name"]
            created.add(name)
            remove(http, resource, f"{path}/{name}")
        no_server_error(http, "PUT", target, mutated(base, changes))
        no_server_error(http, "PATCH", target, merge_patch(changes), "application/merge-patch+json")
        no_server_error(http, "PATCH", target, json_patch(changes), "application/json-patch+json")

    try:
        writes()
    finally:
        for name in {*created, base["metadata"]["name"]}:
            with contextlib.suppress(httpx.HTTPError):
                remove(http, resource, f"{path}/{name}")
