"""The official ``kubernetes`` Python client against our apiserver, configured from the fixture's kubeconfig."""

from __future__ import annotations

import threading
import time

import kubernetes
import pytest
from kubernetes.client.rest import ApiException


@pytest.fixture
def apps(k8s):
    return kubernetes.client.AppsV1Api(k8s)


def pod_body(name: str, labels: dict[str, str] | None = None) -> kubernetes.client.V1Pod:
    return kubernetes.client.V1Pod(
        metadata=kubernetes.client.V1ObjectMeta(name=name, labels=labels or {"app": name}),
        spec=kubernetes.client.V1PodSpec(containers=[
            kubernetes.client.V1Container(name="main", image="busybox:latest", command=["sleep", "3600"]),
        ]),
    )


def test_pod_lifecycle(core, namespace):
    assert core.list_namespaced_pod(namespace).items == []

    created = core.create_namespaced_pod(namespace, pod_body("py-pod", {"app": "py"}))
    assert created.metadata.name == "py-pod"
    assert created.metadata.namespace == namespace
    assert created.metadata.uid
    assert created.metadata.resource_version
    assert created.metadata.creation_timestamp is not None
    assert created.status.phase == "Pending"

    listed = core.list_namespaced_pod(namespace)
    assert [pod.metadata.name for pod in listed.items] == ["py-pod"]
    assert listed.metadata.resource_version
    assert core.list_namespaced_pod(namespace, label_selector="app=other").items == []

    patched = core.patch_namespaced_pod("py-pod", namespace, {"metadata": {"labels": {"tier": "backend"}}})
    assert patched.metadata.labels == {"app": "py", "tier": "backend"}
    assert int(patched.metadata.resource_version) > int(created.metadata.resource_version)

    read = core.read_namespaced_pod("py-pod", namespace)
    assert read.metadata.labels == {"app": "py", "tier": "backend"}
    assert read.metadata.uid == created.metadata.uid
    assert read.spec.containers[0].image == "busybox:latest"
    assert read.spec.containers[0].command == ["sleep", "3600"]

    assert [pod.metadata.name for pod in core.list_namespaced_pod(namespace, label_selector="tier=backend").items] \
        == ["py-pod"]

    # A dict body goes out as a strategic merge patch: containers merge by name, so the command stays.
    patched = core.patch_namespaced_pod("py-pod", namespace,
                                        {"spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]}})
    assert [(c.name, c.image, c.command) for c in patched.spec.containers] == \
        [("main", "busybox:1.36", ["sleep", "3600"])]

    core.delete_namespaced_pod("py-pod", namespace)
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_pod("py-pod", namespace)
    assert missing.value.status == 404


def test_errors_are_api_exceptions(core, namespace):
    core.create_namespaced_pod(namespace, pod_body("twice"))
    with pytest.raises(ApiException) as duplicate:
        core.create_namespaced_pod(namespace, pod_body("twice"))
    assert duplicate.value.status == 409
    assert "AlreadyExists" in duplicate.value.body

    stale = core.read_namespaced_pod("twice", namespace)
    core.patch_namespaced_pod("twice", namespace, {"metadata": {"labels": {"bump": "1"}}})
    stale.metadata.labels = {"stale": "write"}
    with pytest.raises(ApiException) as conflict:
        core.replace_namespaced_pod("twice", namespace, stale)
    assert conflict.value.status == 409
    assert "Conflict" in conflict.value.body


def test_watch_sees_added_then_modified(core, namespace):
    core.create_namespaced_pod(namespace, pod_body("watched"))

    def change_later():
        time.sleep(1.0)
        core.patch_namespaced_pod("watched", namespace, {"metadata": {"labels": {"step": "two"}}})

    changer = threading.Thread(target=change_later, daemon=True)
    watch = kubernetes.watch.Watch()
    events = []
    changer.start()
    try:
        for event in watch.stream(core.list_namespaced_pod, namespace, timeout_seconds=15):
            events.append(event)
            if event["type"] == "MODIFIED":
                break
    finally:
        watch.stop()
        changer.join(10)

    kinds = [(event["type"], event["object"].metadata.name) for event in events]
    assert kinds[0] == ("ADDED", "watched"), kinds
    assert kinds[-1] == ("MODIFIED", "watched"), kinds
    added, modified = events[0]["object"], events[-1]["object"]
    assert isinstance(modified, kubernetes.client.V1Pod)
    assert modified.metadata.labels == {"app": "watched", "step": "two"}
    assert int(modified.metadata.resource_version) > int(added.metadata.resource_version)

    core.delete_namespaced_pod("watched", namespace)
    assert core.list_namespaced_pod(namespace).items == []


def test_deployment_create_read_and_scale(apps, namespace):
    labels = {"app": "py-web"}
    body = kubernetes.client.V1Deployment(
        metadata=kubernetes.client.V1ObjectMeta(name="py-web", labels=labels),
        spec=kubernetes.client.V1DeploymentSpec(
            replicas=1,
            selector=kubernetes.client.V1LabelSelector(match_labels=labels),
            template=kubernetes.client.V1PodTemplateSpec(
                metadata=kubernetes.client.V1ObjectMeta(labels=labels),
                spec=kubernetes.client.V1PodSpec(containers=[
                    kubernetes.client.V1Container(name="web", image="nginx:1.25"),
                ]),
            ),
        ),
    )

    created = apps.create_namespaced_deployment(namespace, body)
    assert created.metadata.name == "py-web"
    assert created.spec.replicas == 1

    read = apps.read_namespaced_deployment("py-web", namespace)
    assert read.metadata.uid == created.metadata.uid
    assert read.spec.selector.match_labels == labels
    assert read.spec.template.spec.containers[0].image == "nginx:1.25"
    assert [d.metadata.name for d in apps.list_namespaced_deployment(namespace).items] == ["py-web"]

    scale = apps.patch_namespaced_deployment_scale("py-web", namespace, {"spec": {"replicas": 4}})
    assert isinstance(scale, kubernetes.client.V1Scale)
    assert scale.spec.replicas == 4

    assert apps.read_namespaced_deployment_scale("py-web", namespace).spec.replicas == 4
    assert apps.read_namespaced_deployment("py-web", namespace).spec.replicas == 4

    apps.delete_namespaced_deployment("py-web", namespace)
    with pytest.raises(ApiException) as missing:
        apps.read_namespaced_deployment("py-web", namespace)
    assert missing.value.status == 404
