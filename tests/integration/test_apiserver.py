"""The apiserver against real etcd: CRUD semantics, conflicts, validation, selectors, watch, deletion, auth."""

import json
import ssl
import threading
import time

import httpx
import pytest

from daemons.api import errors
from daemons.api.resources import resolve

PODS = resolve("pods")
DEPLOYMENTS = resolve("deployments")
NODES = resolve("nodes")
SERVICES = resolve("services")


def pod(name, labels=None, **spec):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {"app": "web"}},
            "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec}}


def deployment(name, replicas=2):
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}


@pytest.fixture
def http(apiserver):
    with httpx.Client(base_url=apiserver.url, verify=ssl.create_default_context(cafile=apiserver.ca_file),
                      headers={"Authorization": f"Bearer {apiserver.admin_token}"}) as client:
        yield client


def names(api, resource, namespace, **selectors):
    return sorted(item["metadata"]["name"] for item in api.list(resource, namespace, **selectors)["items"])


def test_create_sets_server_fields_and_get_returns_them(api, namespace):
    created = api.create(PODS, pod("web"), namespace)
    metadata = created["metadata"]
    assert metadata["uid"] and metadata["creationTimestamp"] and int(metadata["resourceVersion"]) > 0
    assert metadata["namespace"] == namespace and metadata["generation"] == 1
    assert created["status"] == {"phase": "Pending"}
    assert created["spec"]["restartPolicy"] == "Always"
    assert api.get(PODS, "web", namespace) == created
    with pytest.raises(errors.AlreadyExists):
        api.create(PODS, pod("web"), namespace)


def test_update_bumps_generation_only_on_spec_changes_and_keeps_status(api, namespace):
    created = api.create(DEPLOYMENTS, deployment("web"), namespace)
    relabelled = api.patch(DEPLOYMENTS, "web", {"metadata": {"labels": {"tier": "front"}}}, namespace)
    assert relabelled["metadata"]["generation"] == 1
    scaled = api.patch(DEPLOYMENTS, "web", {"spec": {"replicas": 4}, "status": {"replicas": 99}}, namespace)
    assert scaled["metadata"]["generation"] == 2
    assert scaled["status"].get("replicas") != 99, "a write through the main resource must not change status"
    assert int(scaled["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    unchanged = api.patch(DEPLOYMENTS, "web", {"spec": {"replicas": 4}}, namespace)
    assert unchanged["metadata"]["resourceVersion"] == scaled["metadata"]["resourceVersion"]


def test_two_writers_racing_on_one_resource_version_get_exactly_one_conflict(api, apiserver, namespace):
    current = api.create(DEPLOYMENTS, deployment("race"), namespace)
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def writer(replicas):
        body = json.loads(json.dumps(current))
        body["spec"]["replicas"] = replicas
        with apiserver.client() as client:
            barrier.wait()
            try:
                client.replace(DEPLOYMENTS, body, namespace)
                outcomes.append("ok")
            except errors.Conflict:
                outcomes.append("conflict")

    threads = [threading.Thread(target=writer, args=(n,)) for n in (5, 7)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["conflict", "ok"]
    assert api.get(DEPLOYMENTS, "race", namespace)["spec"]["replicas"] in (5, 7)


def test_stale_resource_version_in_patch_is_a_conflict(api, namespace):
    created = api.create(PODS, pod("web"), namespace)
    api.patch(PODS, "web", {"metadata": {"labels": {"a": "1"}}}, namespace)
    with pytest.raises(errors.Conflict):
        api.patch(PODS, "web", {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"],
                                             "labels": {"a": "2"}}}, namespace)
    assert api.get(PODS, "web", namespace)["metadata"]["labels"]["a"] == "1"


def test_invalid_objects_get_422_naming_each_field_and_write_nothing(api, namespace, http):
    before = api.list(PODS, namespace)["metadata"]["resourceVersion"]
    bad = pod("Bad_Name", restartPolicy="Sometimes")
    bad["spec"]["containers"].append({"name": "second"})
    with pytest.raises(errors.Invalid) as raised:
        api.create(PODS, bad, namespace)
    fields = {cause["field"] for cause in raised.value.causes}
    assert {"metadata.name", "spec.restartPolicy", "spec.containers[1].image"} <= fields
    response = http.post(f"/api/v1/namespaces/{namespace}/pods", json=bad)
    assert response.status_code == 422
    assert response.json()["kind"] == "Status" and response.json()["reason"] == "Invalid"
    assert api.list(PODS, namespace)["items"] == []
    with pytest.raises(errors.Invalid) as raised:
        api.create(DEPLOYMENTS, {**deployment("web"), "spec": {**deployment("web")["spec"], "replicas": "three"}},
                   namespace)
    assert [cause["field"] for cause in raised.value.causes] == ["spec.replicas"]
    assert api.list(DEPLOYMENTS, namespace)["items"] == []
    assert int(api.list(PODS, namespace)["metadata"]["resourceVersion"]) >= int(before)


def test_malformed_unknown_and_oversized_requests(http, namespace, api):
    response = http.post(f"/api/v1/namespaces/{namespace}/pods", content=b"{not json",
                         headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and response.json()["reason"] == "BadRequest"
    response = http.post(f"/api/v1/namespaces/{namespace}/widgets", json=pod("web"))
    assert response.status_code == 404
    huge = pod("huge")
    huge["metadata"]["annotations"] = {"blob": "x" * (3 * 1024 * 1024 + 10)}
    response = http.post(f"/api/v1/namespaces/{namespace}/pods", json=huge)
    assert response.status_code == 413
    response = http.post("/api/v1/namespaces/no-such-namespace/pods", json=pod("web"))
    assert response.status_code == 404 and "namespaces" in response.json()["message"]
    response = http.post(f"/api/v1/namespaces/{namespace}/pods", json={**pod("web"), "kind": "Service"})
    assert response.status_code == 400
    assert api.list(PODS, namespace)["items"] == []


def test_strict_field_validation_rejects_unknown_fields(http, namespace, api):
    body = pod("web")
    body["spec"]["containers"][0]["imagePulPolicy"] = "Always"
    response = http.post(f"/api/v1/namespaces/{namespace}/pods?fieldValidation=Strict", json=body)
    assert response.status_code == 400
    assert 'unknown field "spec.containers[0].imagePulPolicy"' in response.json()["message"]
    assert api.list(PODS, namespace)["items"] == []
    response = http.post(f"/api/v1/namespaces/{namespace}/pods", json=body)
    assert response.status_code == 201 and "imagePulPolicy" in response.headers["warning"]


def test_label_and_field_selectors(api, namespace):
    api.create(PODS, pod("a", {"app": "web", "tier": "front"}), namespace)
    api.create(PODS, pod("b", {"app": "web", "tier": "back"}), namespace)
    api.create(PODS, pod("c", {"app": "db"}), namespace)
    assert names(api, PODS, namespace, label_selector="app=web") == ["a", "b"]
    assert names(api, PODS, namespace, label_selector="app==web,tier!=back") == ["a"]
    assert names(api, PODS, namespace, label_selector="tier in (front,back)") == ["a", "b"]
    assert names(api, PODS, namespace, label_selector="tier notin (front)") == ["b", "c"]
    assert names(api, PODS, namespace, label_selector="tier") == ["a", "b"]
    assert names(api, PODS, namespace, label_selector="!tier") == ["c"]
    assert names(api, PODS, namespace, field_selector="metadata.name=b") == ["b"]
    assert names(api, PODS, namespace, field_selector="status.phase=Pending,spec.nodeName=") == ["a", "b", "c"]
    with pytest.raises(errors.BadRequest):
        api.list(PODS, namespace, label_selector="app in (")
    with pytest.raises(errors.BadRequest):
        api.list(PODS, namespace, field_selector="spec.hostname=x")


def test_watch_from_an_old_revision_replays_every_change(api, namespace):
    start = api.list(PODS, namespace)["metadata"]["resourceVersion"]
    api.create(PODS, pod("w1"), namespace)
    api.patch(PODS, "w1", {"metadata": {"labels": {"step": "2"}}}, namespace)
    api.create(PODS, pod("w2", {"app": "other"}), namespace)
    api.delete(PODS, "w1", namespace)
    seen = []
    for event in api.watch(PODS, namespace, resource_version=start, timeout_seconds=2):
        seen.append((event["type"], event["object"]["metadata"]["name"]))
    assert seen == [("ADDED", "w1"), ("MODIFIED", "w1"), ("ADDED", "w2"), ("DELETED", "w1")]
    filtered = [(event["type"], event["object"]["metadata"]["name"])
                for event in api.watch(PODS, namespace, resource_version=start, label_selector="app=web",
                                       timeout_seconds=2)]
    assert filtered == [("ADDED", "w1"), ("MODIFIED", "w1"), ("DELETED", "w1")]


def test_watch_without_version_starts_with_current_state_then_streams(api, apiserver, namespace):
    api.create(PODS, pod("existing"), namespace)
    events = []
    ready = threading.Event()

    def follow():
        with apiserver.client() as client:
            for event in client.watch(PODS, namespace, timeout_seconds=5):
                events.append((event["type"], event["object"]["metadata"]["name"]))
                ready.set()
                if len(events) == 2:
                    return

    thread = threading.Thread(target=follow)
    thread.start()
    assert ready.wait(5)
    api.create(PODS, pod("later"), namespace)
    thread.join(10)
    assert events == [("ADDED", "existing"), ("ADDED", "later")]


def test_compacted_resource_version_is_gone(api, namespace, etcd, http):
    import asyncio

    import aetcd

    first = api.create(PODS, pod("old"), namespace)["metadata"]["resourceVersion"]
    latest = api.patch(PODS, "old", {"metadata": {"labels": {"v": "2"}}}, namespace)["metadata"]["resourceVersion"]

    async def compact():
        async with aetcd.Client(host=etcd.host, port=etcd.port) as client:
            await client.compact(int(latest))

    asyncio.run(compact())
    response = http.get(f"/api/v1/namespaces/{namespace}/pods",
                        params={"watch": "true", "resourceVersion": str(int(first) - 1)})
    assert response.status_code == 410
    assert response.json()["reason"] == "Expired"


def test_graceful_deletion_of_a_bound_pod_and_finalizers(api, namespace, http):
    api.create(PODS, pod("bound", nodeName="node1", terminationGracePeriodSeconds=20), namespace)
    marked = api.delete(PODS, "bound", namespace)
    assert marked["metadata"]["deletionTimestamp"] and marked["metadata"]["deletionGracePeriodSeconds"] == 20
    assert api.get(PODS, "bound", namespace)["metadata"]["deletionTimestamp"]
    api.delete(PODS, "bound", namespace, grace_period_seconds=0)
    with pytest.raises(errors.NotFound):
        api.get(PODS, "bound", namespace)

    api.create(PODS, pod("unscheduled"), namespace)
    api.delete(PODS, "unscheduled", namespace)
    with pytest.raises(errors.NotFound):
        api.get(PODS, "unscheduled", namespace)

    held = {**deployment("held"), "metadata": {"name": "held", "finalizers": ["example.com/hold"]}}
    api.create(DEPLOYMENTS, held, namespace)
    response = http.delete(f"/apis/apps/v1/namespaces/{namespace}/deployments/held")
    assert response.status_code == 202
    assert api.get(DEPLOYMENTS, "held", namespace)["metadata"]["deletionTimestamp"]
    api.patch(DEPLOYMENTS, "held", {"metadata": {"finalizers": None}}, namespace)
    with pytest.raises(errors.NotFound):
        api.get(DEPLOYMENTS, "held", namespace)


def test_delete_collection_by_label(api, namespace):
    for name, app in (("a", "web"), ("b", "web"), ("c", "db")):
        api.create(PODS, pod(name, {"app": app}), namespace)
    api.delete_collection(PODS, namespace, label_selector="app=web")
    assert names(api, PODS, namespace) == ["c"]


def test_status_binding_and_scale_subresources(api, namespace, http):
    api.create(PODS, pod("web"), namespace)
    current = api.get(PODS, "web", namespace)
    current["status"] = {"phase": "Running", "podIP": "10.244.0.7"}
    current["spec"]["containers"][0]["image"] = "changed-through-status"
    updated = api.update_status(PODS, current)
    assert updated["status"]["phase"] == "Running" and updated["status"]["podIP"] == "10.244.0.7"
    assert updated["spec"]["containers"][0]["image"] == "busybox"

    response = http.post(f"/api/v1/namespaces/{namespace}/pods/web/binding",
                         json={"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "web"},
                               "target": {"kind": "Node", "name": "node1"}})
    assert response.status_code == 201
    assert api.get(PODS, "web", namespace)["spec"]["nodeName"] == "node1"
    again = http.post(f"/api/v1/namespaces/{namespace}/pods/web/binding",
                      json={"target": {"kind": "Node", "name": "node2"}})
    assert again.status_code == 409

    api.create(DEPLOYMENTS, deployment("web", replicas=2), namespace)
    scale = api.get(DEPLOYMENTS, "web", namespace, subresource="scale")
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 2 and scale["status"]["selector"] == "app=web"
    api.patch(DEPLOYMENTS, "web", {"spec": {"replicas": 6}}, namespace, subresource="scale")
    assert api.get(DEPLOYMENTS, "web", namespace)["spec"]["replicas"] == 6
    scale["spec"]["replicas"] = 1
    with pytest.raises(errors.Conflict):
        api.replace(DEPLOYMENTS, scale, namespace, subresource="scale")


def test_pod_spec_is_immutable_but_image(api, namespace):
    api.create(PODS, pod("web"), namespace)
    api.patch(PODS, "web", {"spec": {"containers": [{"name": "main", "image": "nginx"}]}}, namespace,
              patch_type="strategic")
    assert api.get(PODS, "web", namespace)["spec"]["containers"][0]["image"] == "nginx"
    with pytest.raises(errors.Invalid) as raised:
        api.patch(PODS, "web", {"spec": {"restartPolicy": "Never"}}, namespace)
    assert raised.value.causes[0]["field"] == "spec"


def test_cluster_scoped_objects_and_a_namespace_is_held_until_finalized(api, namespace):
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-1.example.com"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    created = api.create(NODES, node)
    assert "namespace" not in created["metadata"]
    assert created["status"]["conditions"][0]["status"] == "True"
    api.delete(NODES, "worker-1.example.com")
    api.create(PODS, pod("inside"), namespace)
    namespaces = resolve("namespaces")
    assert api.get(namespaces, namespace)["spec"]["finalizers"] == ["kubernetes"]
    start = api.get(namespaces, namespace)["metadata"]["resourceVersion"]
    marked = api.delete(namespaces, namespace)
    assert marked["status"]["phase"] == "Terminating" and marked["metadata"]["deletionTimestamp"]
    with pytest.raises(errors.Forbidden):
        api.create(PODS, pod("late"), namespace)
    assert api.get(PODS, "inside", namespace)  # emptying it is the namespace controller's work
    api.delete(PODS, "inside", namespace)
    api.replace(namespaces, {**marked, "spec": {"finalizers": []}}, subresource="finalize")
    with pytest.raises(errors.NotFound):
        api.get(namespaces, namespace)
    events = [(event["type"], (event["object"].get("status") or {}).get("phase"))
              for event in api.watch(namespaces, resource_version=start, field_selector=f"metadata.name={namespace}",
                                     timeout_seconds=1)]
    assert events == [("MODIFIED", "Terminating"), ("DELETED", "Terminating")], events


def test_authentication(apiserver):
    with httpx.Client(base_url=apiserver.url, verify=ssl.create_default_context(cafile=apiserver.ca_file)) as anonymous:
        for path in ("/healthz", "/readyz", "/livez", "/version"):
            assert anonymous.get(path).status_code == 200, path
        response = anonymous.get("/api/v1/pods")
        assert response.status_code == 401 and response.json()["reason"] == "Unauthorized"
        assert anonymous.get("/api/v1/pods", headers={"Authorization": "Bearer wrong"}).status_code == 401
    with apiserver.client(token=apiserver.kubelet_token) as kubelet:
        assert kubelet.list(PODS, all_namespaces=True)["kind"] == "PodList"


def test_discovery_version_and_metrics(http):
    assert http.get("/api").json()["versions"] == ["v1"]
    groups = {group["name"] for group in http.get("/apis").json()["groups"]}
    assert "apps" in groups
    core = {entry["name"]: entry for entry in http.get("/api/v1").json()["resources"]}
    assert core["pods"]["shortNames"] == ["po"] and core["pods"]["namespaced"]
    assert {"pods/status", "pods/binding"} <= set(core)
    apps = {entry["name"]: entry for entry in http.get("/apis/apps/v1").json()["resources"]}
    assert apps["deployments/scale"]["kind"] == "Scale"
    assert http.get("/version").json()["major"] == "1"
    http.get("/api/v1/namespaces/default/pods")
    metrics = http.get("/metrics").text
    assert 'apiserver_request_total{code="200",resource="pods",verb="LIST"}' in metrics
    assert "apiserver_request_duration_seconds_bucket" in metrics


def test_table_responses_have_upstream_columns(http, api, namespace):
    api.create(PODS, pod("web"), namespace)
    table = http.get(f"/api/v1/namespaces/{namespace}/pods",
                     headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}).json()
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0] == [
        "Name", "Ready", "Status", "Restarts", "Age"]
    assert table["rows"][0]["cells"][:4] == ["web", "0/1", "Pending", "0"]


def test_etcd_outage_is_503_not_a_crash(api, etcd, http):
    etcd.stop()
    try:
        response = http.get("/api/v1/namespaces/default/pods", timeout=30)
        assert response.status_code == 503
        assert http.get("/readyz", timeout=30).status_code == 503
    finally:
        etcd.start()
    deadline = time.monotonic() + 15
    while http.get("/readyz").status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert api.list(PODS, "default")["kind"] == "PodList"


def test_back_to_back_writes_never_see_a_stale_precondition(api, namespace):
    """Each write uses the resourceVersion the previous one returned: none may fail or be lost as a no-op."""
    current = api.create(PODS, pod("busy"), namespace)
    for step in range(40):
        current["metadata"]["labels"]["step"] = str(step)
        current = api.replace(PODS, current, namespace)
        current = api.patch(PODS, "busy", {"metadata": {"labels": {"patched": str(step)}}}, namespace)
        current = api.patch(PODS, "busy", {"metadata": {"labels": {"patched": "same"}}}, namespace)
    stored = api.get(PODS, "busy", namespace)
    assert stored["metadata"]["labels"] == {"app": "web", "step": "39", "patched": "same"}
    assert stored["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]


def test_concurrent_unpinned_patches_all_apply(api, apiserver, namespace):
    """Patches without a resourceVersion are retried on lost races: every writer's label lands."""
    api.create(PODS, pod("shared"), namespace)
    failures = []

    def writer(index):
        with apiserver.client() as client:
            for step in range(10):
                try:
                    client.patch(PODS, "shared", {"metadata": {"labels": {f"w{index}": str(step)}}}, namespace)
                except errors.APIError as error:
                    failures.append(error)

    threads = [threading.Thread(target=writer, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    labels = api.get(PODS, "shared", namespace)["metadata"]["labels"]
    assert {key: labels[key] for key in ("w0", "w1", "w2", "w3")} == {f"w{i}": "9" for i in range(4)}
