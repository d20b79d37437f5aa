"""The event publisher: every committed change reaches RabbitMQ, even across a SIGKILL of the apiserver."""

import json
import threading
import time

import pika
import pytest

from daemons.api import errors
from daemons.api.resources import resolve

PODS = resolve("pods")


@pytest.fixture
def consumer(rabbitmq, namespace):
    """A private queue bound to this namespace's pod events; yields a function draining it."""
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq.url))
    channel = connection.channel()
    channel.exchange_declare("minik8s.events", exchange_type="topic", durable=True)
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(queue, "minik8s.events", routing_key=f"pods.{namespace}.*")

    def drain(until, timeout: float = 30.0) -> list[tuple[str, dict]]:
        received: list[tuple[str, dict]] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not until(received):
            method, _properties, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                time.sleep(0.05)
                continue
            received.append((method.routing_key, json.loads(body)))
        return received

    try:
        yield drain
    finally:
        connection.close()


def pod(name):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]}}


def test_changes_are_published_with_routing_key_and_watch_event_body(api, namespace, consumer):
    created = api.create(PODS, pod("web"), namespace)
    api.patch(PODS, "web", {"metadata": {"labels": {"a": "1"}}}, namespace)
    deleted_at = api.delete(PODS, "web", namespace)
    events = consumer(lambda got: len(got) >= 3)
    assert [(key, body["type"]) for key, body in events] == [
        (f"pods.{namespace}.web", "ADDED"), (f"pods.{namespace}.web", "MODIFIED"), (f"pods.{namespace}.web", "DELETED")]
    assert events[0][1]["object"]["metadata"]["uid"] == created["metadata"]["uid"]
    revisions = [int(body["object"]["metadata"]["resourceVersion"]) for _key, body in events]
    assert revisions == sorted(revisions) and revisions[0] == int(created["metadata"]["resourceVersion"])
    assert events[2][1]["object"]["metadata"]["name"] == deleted_at["metadata"]["name"]


def test_publisher_killed_mid_stream_leaves_no_gap(apiserver, namespace, consumer):
    """SIGKILL the apiserver while a writer commits changes; after a restart, every commit is delivered."""
    committed: list[int] = []
    stop = threading.Event()

    def writer():
        with apiserver.client() as client:
            client.create(PODS, pod("churn"), namespace)
            step = 0
            while not stop.is_set():
                step += 1
                try:
                    changed = client.patch(PODS, "churn", {"metadata": {"labels": {"step": str(step)}}}, namespace)
                except (errors.ConnectionFailed, errors.ServiceUnavailable):
                    time.sleep(0.05)
                    continue
                committed.append(int(changed["metadata"]["resourceVersion"]))

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        while len(committed) < 30:
            time.sleep(0.02)
        apiserver.kill()
        apiserver.start()
        before_restart = len(committed)
        while len(committed) < before_restart + 30:
            time.sleep(0.02)
    finally:
        stop.set()
        thread.join(30)
    expected = set(committed)
    events = consumer(lambda got: expected <= {int(body["object"]["metadata"]["resourceVersion"])
                                               for _key, body in got})
    delivered = [int(body["object"]["metadata"]["resourceVersion"]) for _key, body in events]
    missing = sorted(expected - set(delivered))
    assert not missing, f"{len(missing)} committed revisions never published: {missing[:10]}"
    print(f"committed {len(expected)} changes across a SIGKILL; delivered {len(delivered)} events "
          f"({len(delivered) - len(set(delivered))} duplicates, 0 missing)")
