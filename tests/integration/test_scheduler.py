"""The scheduler as it runs in production (the console script, fed by RabbitMQ) against the real apiserver.

Other tests share the apiserver and leave pods pending in their namespaces, so the
three nodes made here carry a taint unique to this module and the pods made here
tolerate it and select the nodes' label: nothing else lands on these nodes, and
these pods land nowhere else.
"""

from __future__ import annotations

import collections
import contextlib
import uuid
from collections.abc import Iterator

import httpx
import pytest

from daemons.api.client import ApiClient
from daemons.api.errors import NotFound
from daemons.api.resources import resolve
from tests.conftest import ApiServerProcess, RabbitMQProcess, SchedulerProcess, events, serving, wait_for

PODS = resolve("pods")
NODES = resolve("nodes")
LABEL = "minik8s.test/scheduler"
ZONES = ("a", "b", "c")


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory: pytest.TempPathFactory, apiserver: ApiServerProcess,
              rabbitmq: RabbitMQProcess) -> Iterator[SchedulerProcess]:
    with serving(SchedulerProcess(tmp_path_factory.mktemp("scheduler"), apiserver), rabbitmq) as process:
        yield process


@contextlib.contextmanager
def ready_nodes(api: ApiClient, cluster_id: str, zones: tuple[str, ...]) -> Iterator[list[str]]:
    """Ready nodes (2 cpu, 4Gi, 110 pods), one per zone, labelled and tainted with ``cluster_id``; deleted after."""
    names = [node_name(cluster_id, zone) for zone in zones]
    try:
        for zone, name in zip(zones, names, strict=True):
            api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": name, "labels": {LABEL: cluster_id, "zone": zone}},
                "spec": {"taints": [module_taint(cluster_id)]}})
            api.patch(NODES, name, {"status": {
                "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
                "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}},
                subresource="status")
        yield names
    finally:
        for name in names:
            with contextlib.suppress(NotFound):
                api.delete(NODES, name)


@pytest.fixture(scope="module")
def cluster(apiserver: ApiServerProcess) -> Iterator[str]:
    """Three Ready nodes labelled and tainted with an id unique to this module."""
    cluster_id = uuid.uuid4().hex[:8]
    with apiserver.client() as client, ready_nodes(client, cluster_id, ZONES):
        yield cluster_id


def node_name(cluster_id: str, zone: str) -> str:
    return f"sched-{cluster_id}-{zone}"


def module_taint(cluster_id: str) -> dict:
    return {"key": LABEL, "value": cluster_id, "effect": "NoSchedule"}


def pod(name: str, cluster_id: str, zone: str | None = None, cpu: str | None = None,
        tolerations: tuple[dict, ...] = (), scheduler_name: str = "default-scheduler") -> dict:
    """A pod for this module's nodes only (optionally the one of ``zone``)."""
    selector = {LABEL: cluster_id, **({"zone": zone} if zone else {})}
    container = {"name": "main", "image": "busybox", **({"resources": {"requests": {"cpu": cpu}}} if cpu else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [container], "nodeSelector": selector, "schedulerName": scheduler_name,
                     "tolerations": [{**module_taint(cluster_id), "operator": "Equal"}, *tolerations]}}


def assigned(api: ApiClient, namespace: str, name: str) -> str:
    return api.get(PODS, name, namespace)["spec"].get("nodeName") or ""


def wait_bound(api: ApiClient, namespace: str, names: list[str], scheduler: SchedulerProcess) -> dict[str, str]:
    """Each pod's node, once all are bound."""
    return wait_for(lambda: {name: assigned(api, namespace, name) for name in names},
                    lambda placed: all(placed.values()), scheduler)


def refusal(api: ApiClient, namespace: str, cluster_id: str, zone: str, scheduler: SchedulerProcess) -> str:
    """Probe the node of ``zone`` with pinned pods until one is refused; the FailedScheduling message.

    A probe that gets bound shows the scheduler had not yet seen the change made to the
    node (node and pod events come through different queues): it is removed, and the next
    probe asks again.
    """
    for attempt in range(10):
        name = f"probe-{zone}-{attempt}"
        api.create(PODS, pod(name, cluster_id, zone=zone), namespace)
        wait_for(lambda name=name: assigned(api, namespace, name) or events(api, namespace, name, "FailedScheduling"),
                 bool, scheduler)
        failed = events(api, namespace, name, "FailedScheduling")
        if failed:
            return failed[0]["message"]
        api.delete(PODS, name, namespace, grace_period_seconds=0)
    raise AssertionError(f"the scheduler kept binding probes to zone {zone}\n{scheduler.logs()}")


def create_pods(api: ApiClient, namespace: str, cluster_id: str, count: int, prefix: str = "p",
                **kwargs: object) -> list[str]:
    names = [f"{prefix}{index}" for index in range(count)]
    for name in names:
        api.create(PODS, pod(name, cluster_id, **kwargs), namespace)
    return names


def test_pods_are_bound_and_spread_round_robin(scheduler, cluster, api, namespace):
    names = create_pods(api, namespace, cluster, 6)
    placed = wait_bound(api, namespace, names, scheduler)
    assert collections.Counter(placed.values()) == {node_name(cluster, zone): 2 for zone in ZONES}
    bound = api.get(PODS, "p0", namespace)
    assert {"type": "PodScheduled", "status": "True"}.items() <= bound["status"]["conditions"][0].items()
    scheduled = wait_for(lambda: events(api, namespace, "p0", "Scheduled"), bool, scheduler)[0]
    assert scheduled["message"] == f"Successfully assigned {namespace}/p0 to {placed['p0']}"
    assert scheduled["source"]["component"] == "default-scheduler"
    metrics = httpx.get(scheduler.metrics_url, timeout=5).text
    assert 'minik8s_scheduler_schedule_attempts_total{result="scheduled"}' in metrics


def test_a_node_selector_picks_the_node(scheduler, cluster, api, namespace):
    api.create(PODS, pod("zoned", cluster, zone="b"), namespace)
    assert wait_bound(api, namespace, ["zoned"], scheduler) == {"zoned": node_name(cluster, "b")}


def test_a_pod_too_big_for_every_node_stays_pending(scheduler, cluster, api, namespace):
    api.create(PODS, pod("huge", cluster, cpu="3"), namespace)
    message = wait_for(lambda: events(api, namespace, "huge", "FailedScheduling"), bool, scheduler)[0]["message"]
    assert message.startswith("0/") and "3 Insufficient cpu" in message, message

    def unschedulable() -> dict | None:
        conditions = api.get(PODS, "huge", namespace).get("status", {}).get("conditions") or []
        return next((item for item in conditions if item["type"] == "PodScheduled"), None)

    condition = wait_for(unschedulable, bool, scheduler)
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert "Insufficient cpu" in condition["message"]
    assert assigned(api, namespace, "huge") == ""


def test_a_burst_fills_nodes_by_their_requests(scheduler, cluster, api, namespace):
    names = create_pods(api, namespace, cluster, 6, cpu="1")
    placed = wait_bound(api, namespace, names, scheduler)
    assert collections.Counter(placed.values()) == {node_name(cluster, zone): 2 for zone in ZONES}
    api.create(PODS, pod("one-too-many", cluster, cpu="1"), namespace)
    failed = wait_for(lambda: events(api, namespace, "one-too-many", "FailedScheduling"), bool, scheduler)
    assert "3 Insufficient cpu" in failed[0]["message"]
    api.delete(PODS, "p0", namespace, grace_period_seconds=0)
    assert wait_bound(api, namespace, ["one-too-many"], scheduler) == {"one-too-many": placed["p0"]}


def test_a_cordoned_node_gets_no_new_pods(scheduler, cluster, api, namespace):
    cordoned = node_name(cluster, "a")
    api.patch(NODES, cordoned, {"spec": {"unschedulable": True}})
    try:
        assert "node(s) were unschedulable" in refusal(api, namespace, cluster, "a", scheduler)
        placed = wait_bound(api, namespace, create_pods(api, namespace, cluster, 4), scheduler)
        assert cordoned not in placed.values()
    finally:
        api.patch(NODES, cordoned, {"spec": {"unschedulable": None}})


def test_a_not_ready_node_gets_nothing(scheduler, cluster, api, namespace):
    sick = node_name(cluster, "b")
    api.patch(NODES, sick, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, subresource="status")
    try:
        assert "node(s) were not ready" in refusal(api, namespace, cluster, "b", scheduler)
        placed = wait_bound(api, namespace, create_pods(api, namespace, cluster, 4), scheduler)
        assert sick not in placed.values()
    finally:
        api.patch(NODES, sick, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
                  subresource="status")


def test_a_tainted_node_takes_only_tolerating_pods(scheduler, cluster, api, namespace):
    tainted = node_name(cluster, "c")
    dedicated = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    api.patch(NODES, tainted, {"spec": {"taints": [module_taint(cluster), dedicated]}})
    try:
        assert "node(s) had untolerated taint {dedicated: ml}" in refusal(api, namespace, cluster, "c", scheduler)
        placed = wait_bound(api, namespace, create_pods(api, namespace, cluster, 4), scheduler)
        assert tainted not in placed.values()
        toleration = {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}
        api.create(PODS, pod("tolerant", cluster, zone="c", tolerations=(toleration,)), namespace)
        assert wait_bound(api, namespace, ["tolerant"], scheduler) == {"tolerant": tainted}
    finally:
        api.patch(NODES, tainted, {"spec": {"taints": [module_taint(cluster)]}})


def test_scheduling_goes_on_across_broker_and_apiserver_restarts(scheduler, cluster, rabbitmq, apiserver, api,
                                                                  namespace):
    rabbitmq.stop()
    try:
        api.create(PODS, pod("while-broker-down", cluster), namespace)
    finally:
        rabbitmq.start()
    wait_bound(api, namespace, ["while-broker-down"], scheduler)
    apiserver.kill()
    apiserver.start()
    api.create(PODS, pod("after-apiserver-restart", cluster), namespace)
    wait_bound(api, namespace, ["after-apiserver-restart"], scheduler)


def test_a_second_scheduler_on_the_http_watch_takes_only_its_own_pods(scheduler, cluster, apiserver, api, namespace,
                                                                      tmp_path):
    other = SchedulerProcess(tmp_path, apiserver, "--scheduler-name", "other-scheduler", "--strategy", "LeastPods")
    other.start()
    try:
        api.create(PODS, pod("for-other", cluster, scheduler_name="other-scheduler"), namespace)
        wait_bound(api, namespace, ["for-other"], other)
        scheduled = wait_for(lambda: events(api, namespace, "for-other", "Scheduled"), bool, other)
        assert scheduled[0]["source"]["component"] == "other-scheduler"
        assert "for-other" not in scheduler.log_file.read_text()
    finally:
        other.stop()


def placements(api: ApiClient, namespace: str) -> dict[str, str]:
    """Each pod of ``namespace`` and its node ("" while unbound)."""
    return {item["metadata"]["name"]: item["spec"].get("nodeName") or "" for item in api.list(PODS, namespace)["items"]}


def test_a_pool_of_bindings_places_200_pods_on_20_nodes(scheduler, api, namespace):
    pool_id = uuid.uuid4().hex[:8]
    with ready_nodes(api, pool_id, tuple(f"z{index:02d}" for index in range(20))) as nodes:
        names = create_pods(api, namespace, pool_id, 200)
        placed = wait_for(lambda: placements(api, namespace), lambda now: all(now.values()) and len(now) == 200,
                          scheduler)
        assert set(placed) == set(names)
        assert collections.Counter(placed.values()) == {name: 10 for name in nodes}
        metrics = httpx.get(scheduler.metrics_url, timeout=5).text
        assert 'minik8s_scheduler_binding_duration_seconds_count{result="bound"}' in metrics


def test_bindings_refused_for_pods_deleted_meanwhile_leave_the_others_bound(scheduler, cluster, api, namespace):
    """Each doomed pod is deleted as soon as it is created, racing its binding: a binding that finds the pod gone
    is refused by the apiserver (not found, or being deleted), and every other pod is still bound, once."""
    kept = []
    for index in range(40):
        api.create(PODS, pod(f"doomed{index}", cluster), namespace)
        api.delete(PODS, f"doomed{index}", namespace, grace_period_seconds=0)
        kept += create_pods(api, namespace, cluster, 1, prefix=f"kept{index}-")
    wait_bound(api, namespace, kept, scheduler)
    after = create_pods(api, namespace, cluster, 3, prefix="after")
    wait_bound(api, namespace, after, scheduler)
    assert sorted(placements(api, namespace)) == sorted(kept + after)
    for name in kept:
        scheduled = wait_for(lambda name=name: events(api, namespace, name, "Scheduled"), bool, scheduler)
        assert len(scheduled) == 1, scheduled
