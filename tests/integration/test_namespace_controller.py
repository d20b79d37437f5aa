"""The namespace controller in the controller-manager: a deleted namespace is emptied, then removed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from daemons.api.client import ApiClient
from daemons.api.errors import NotFound
from daemons.api.resources import resolve
from tests.conftest import (
    ApiServerProcess,
    ControllerManagerProcess,
    RabbitMQProcess,
    delete_namespace,
    serving,
    wait_for,
)

NAMESPACES = resolve("namespaces")
PODS = resolve("pods")
SERVICES = resolve("services")


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory, apiserver: ApiServerProcess,
            rabbitmq: RabbitMQProcess) -> Iterator[ControllerManagerProcess]:
    process = ControllerManagerProcess(tmp_path_factory.mktemp("controller-manager"), apiserver, "--controllers",
                                       "namespace")
    with serving(process, rabbitmq):
        yield process


def exists(api: ApiClient, resource, name: str, namespace: str | None = None) -> bool:
    try:
        api.get(resource, name, namespace)
    except NotFound:
        return False
    return True


def test_deleted_namespace_is_emptied_then_removed(api: ApiClient, manager: ControllerManagerProcess) -> None:
    name = f"doomed-{uuid.uuid4().hex[:8]}"
    api.create(NAMESPACES, {"metadata": {"name": name}})
    try:
        _empty_then_removed(api, manager, name)
    finally:
        delete_namespace(api, name)


def _empty_then_removed(api: ApiClient, manager: ControllerManagerProcess, name: str) -> None:
    api.create(SERVICES, {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}}, name)
    # Bound to a node: its deletion waits for the kubelet, which this test plays.
    api.create(PODS, {"metadata": {"name": "web"},
                      "spec": {"nodeName": "absent-node", "containers": [{"name": "main", "image": "nginx"}]}}, name)

    api.delete(NAMESPACES, name)
    # Generous bounds: the controller may first work through namespaces earlier tests left.
    wait_for(lambda: exists(api, SERVICES, "web", name), False, manager, timeout=180)
    pod = wait_for(lambda: api.get(PODS, "web", name), lambda pod: bool(pod["metadata"].get("deletionTimestamp")),
                   manager, timeout=180)
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 30
    assert api.get(NAMESPACES, name)["status"]["phase"] == "Terminating"

    api.delete(PODS, "web", name, grace_period_seconds=0)  # the kubelet has stopped it
    wait_for(lambda: exists(api, NAMESPACES, name), False, manager, timeout=180)
