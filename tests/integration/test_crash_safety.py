"""SIGKILL etcd, RabbitMQ or the kubelet: the apiserver answers (or says 503), the event bus loses nothing, and
running pods never notice.

Every daemon but the apiserver learns of changes from the bus, so a change committed while the broker or etcd
was down must still reach a durable queue once both are back, without restarting the apiserver. A restarted
kubelet adopts its pods' containers as they are, ready ones included, so no Service drops them meanwhile.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import docker as docker_sdk
import pika
import pytest

from daemons.api import errors
from daemons.api.client import ApiClient
from daemons.api.resources import resolve
from tests.conftest import EtcdProcess, KubeletProcess, RabbitMQProcess

pytestmark = pytest.mark.integration

PODS = resolve("pods")
EXCHANGE = "minik8s.events"


def pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]}}


def revision(obj: dict) -> int:
    return int(obj["metadata"]["resourceVersion"])


@pytest.fixture
def delivered(rabbitmq: RabbitMQProcess, namespace: str) -> Iterator[Callable[[set[int]], set[int]]]:
    """A durable queue bound to this namespace's pod events before any crash; yields a function that reads it
    until every expected revision arrived (or 60 s passed) and returns the revisions it saw."""
    queue = f"crash-safety.{namespace}"
    with pika.BlockingConnection(pika.URLParameters(rabbitmq.url)) as connection:
        channel = connection.channel()
        channel.exchange_declare(EXCHANGE, exchange_type="topic", durable=True)
        channel.queue_declare(queue, durable=True)
        channel.queue_bind(queue, EXCHANGE, routing_key=f"pods.{namespace}.*")

    def read(expected: set[int]) -> set[int]:
        seen: set[int] = set()
        deadline = time.monotonic() + 60
        with pika.BlockingConnection(pika.URLParameters(rabbitmq.url)) as connection:
            channel = connection.channel()
            while not expected <= seen and time.monotonic() < deadline:
                method, _properties, body = channel.basic_get(queue, auto_ack=True)
                if method is None:
                    time.sleep(0.05)
                    continue
                seen.add(revision(json.loads(body)["object"]))
        return seen

    try:
        yield read
    finally:
        with pika.BlockingConnection(pika.URLParameters(rabbitmq.url)) as connection:
            connection.channel().queue_delete(queue)


def test_the_apiserver_serves_through_a_broker_crash_and_publishes_what_it_missed(
    api: ApiClient, rabbitmq: RabbitMQProcess, namespace: str, delivered: Callable[[set[int]], set[int]],
) -> None:
    rabbitmq.kill()
    try:
        committed = [api.create(PODS, pod(f"while-down-{index}"), namespace) for index in range(3)]
        committed.append(api.patch(PODS, "while-down-0", {"metadata": {"labels": {"seen": "later"}}}, namespace))
        committed.append(api.delete(PODS, "while-down-1", namespace))
    finally:
        rabbitmq.start()
    committed.append(api.create(PODS, pod("after"), namespace))
    expected = {revision(obj) for obj in committed}
    missing = expected - delivered(expected)
    assert not missing, f"revisions committed while the broker was down never reached the queue: {sorted(missing)}"


def test_an_etcd_crash_is_a_503_status_and_the_event_bus_resumes_after(
    api: ApiClient, etcd: EtcdProcess, namespace: str, delivered: Callable[[set[int]], set[int]],
) -> None:
    before = api.create(PODS, pod("before"), namespace)
    etcd.kill()
    try:
        with pytest.raises(errors.ServiceUnavailable) as refused:
            api.create(PODS, pod("during"), namespace)
        with pytest.raises(errors.ServiceUnavailable):
            api.get(PODS, "before", namespace)
    finally:
        etcd.start()
    status = refused.value.status or {}
    assert (status.get("kind"), status.get("status"), status.get("code")) == ("Status", "Failure", 503), status

    after = None
    deadline = time.monotonic() + 30
    while after is None:
        try:
            after = api.create(PODS, pod("after"), namespace)
        except errors.ServiceUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    assert api.get(PODS, "before", namespace)["metadata"]["uid"] == before["metadata"]["uid"]
    with pytest.raises(errors.NotFound):
        api.get(PODS, "during", namespace)
    expected = {revision(before), revision(after)}
    missing = expected - delivered(expected)
    assert not missing, f"revisions around the etcd crash never reached the queue: {sorted(missing)}"


def ready_condition(pod: dict[str, Any]) -> str | None:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "Ready"), None)


def test_a_restarted_kubelet_keeps_a_ready_pod_ready(
    kubelet: KubeletProcess, api: ApiClient, namespace: str, docker: docker_sdk.DockerClient,
) -> None:
    gated = {"name": "main", "image": "busybox", "command": ["sh", "-c", "touch /tmp/ready; exec sleep 3600"],
             "readinessProbe": {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1,
                                "failureThreshold": 1}}
    api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gated"},
                      "spec": {"nodeName": kubelet.node_name, "terminationGracePeriodSeconds": 0,
                               "containers": [gated]}}, namespace)
    deadline = time.monotonic() + 60
    while ready_condition(pod := api.get(PODS, "gated", namespace)) != "True":
        assert time.monotonic() < deadline, f"the pod never became ready: {pod.get('status')}"
        time.sleep(0.2)
    ready_at = pod["metadata"]["resourceVersion"]
    container_id = pod["status"]["containerStatuses"][0]["containerID"].removeprefix("docker://")

    kubelet.kill()
    kubelet.start()
    time.sleep(3)  # the restarted kubelet has synced the pod and probed it a few times
    # Then the probe starts failing, so the pod's last change is a Ready=False only the probe can have caused.
    docker.containers.get(container_id).exec_run(["rm", "/tmp/ready"])
    while ready_condition(api.get(PODS, "gated", namespace)) != "False":
        assert time.monotonic() < deadline + 30, "the failing probe never made the pod unready"
        time.sleep(0.2)

    seen = [ready_condition(event["object"]) for event in api.watch(
        PODS, namespace, resource_version=ready_at, field_selector="metadata.name=gated", timeout_seconds=2)]
    flips = [value for index, value in enumerate(seen) if index == 0 or value != seen[index - 1]]
    assert flips == ["False"], f"Ready went {seen} from the kubelet's restart on"
