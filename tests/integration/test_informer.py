"""The informer against the real apiserver and RabbitMQ: LIST, then events; a broker restart loses nothing."""

import time

import pytest

from daemons.api.resources import resolve
from daemons.machinery.informer import Informer

PODS = resolve("pods")


def pod(name, app="web"):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": app}},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]}}


def eventually(condition, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def cached_names(informer):
    return sorted(obj["metadata"]["name"] for obj in informer.store.list())


@pytest.fixture(params=["rabbitmq", "http-watch"])
def informer(request, apiserver, rabbitmq, namespace, api):
    """An informer over this namespace's pods, fed by the event bus or by the apiserver's watch."""
    api.create(PODS, pod("before"), namespace)
    seen = []
    amqp_url = rabbitmq.url if request.param == "rabbitmq" else None
    subject = Informer(apiserver.client(), PODS, namespace, amqp_url=amqp_url, queue_name=f"test.{namespace}",
                       label_selector="app=web", resync_seconds=300,
                       on_add=lambda obj: seen.append(("add", obj["metadata"]["name"])),
                       on_delete=lambda obj: seen.append(("delete", obj["metadata"]["name"])))
    subject.seen = seen
    subject.start()
    try:
        assert subject.wait_synced(20)
        yield subject
    finally:
        subject.stop()


def test_informer_lists_then_follows_changes(informer, api, namespace):
    assert cached_names(informer) == ["before"]
    api.create(PODS, pod("later"), namespace)
    api.create(PODS, pod("other", app="db"), namespace)
    assert eventually(lambda: cached_names(informer) == ["before", "later"])
    api.patch(PODS, "later", {"metadata": {"labels": {"step": "2"}}}, namespace)
    assert eventually(lambda: informer.store.get(namespace, "later")["metadata"]["labels"].get("step") == "2")
    api.delete(PODS, "before", namespace)
    assert eventually(lambda: cached_names(informer) == ["later"])
    assert ("add", "before") in informer.seen and ("delete", "before") in informer.seen
    assert ("add", "other") not in informer.seen


def test_informer_catches_up_after_a_broker_restart(apiserver, rabbitmq, namespace, api):
    subject = Informer(apiserver.client(), PODS, namespace, amqp_url=rabbitmq.url,
                       queue_name=f"restart.{namespace}", resync_seconds=300)
    subject.start()
    try:
        assert subject.wait_synced(20)
        rabbitmq.stop()
        api.create(PODS, pod("while-broker-down"), namespace)
        rabbitmq.start()
        api.create(PODS, pod("after-restart"), namespace)
        assert eventually(lambda: cached_names(subject) == ["after-restart", "while-broker-down"], timeout=60)
    finally:
        subject.stop()
