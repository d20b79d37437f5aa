"""The scheduling loop against a fake API: binding in the background, assumed pods in a burst, refusals, retries."""

from __future__ import annotations

import copy
import itertools
import threading

import pytest

from daemons.api.errors import Conflict, ConnectionFailed, NotFound
from daemons.scheduler.cache import NodeCache
from daemons.scheduler.scheduler import (
    Scheduler,
    binding,
    pod_changed_for_scheduling,
    unschedulable_condition,
    wants_scheduling,
)
from daemons.scheduler.settings import SchedulerSettings

pytestmark = pytest.mark.unit

REVISIONS = itertools.count(100)


class FakeApi:
    """Records bindings, status patches and events; binding answers can be scripted with errors."""

    def __init__(self) -> None:
        self.bindings: list[tuple[str, str]] = []
        self.binding_errors: list[Exception] = []
        self.status_patches: list[tuple[str, dict]] = []
        self.events: list[dict] = []

    def request(self, method, path, **kwargs):
        assert method == "POST" and path.endswith("/binding")
        if self.binding_errors:
            raise self.binding_errors.pop(0)
        self.bindings.append((path.split("/")[-2], kwargs["json"]["target"]["name"]))
        return {"kind": "Status", "status": "Success"}

    def patch(self, resource, name, patch, namespace=None, patch_type="merge", subresource=None, **_):
        assert (patch_type, subresource) == ("strategic", "status")
        self.status_patches.append((name, patch))
        return {}

    def create(self, resource, body, namespace=None, params=None):
        self.events.append(body)
        return body

    def get(self, resource, name, namespace=None, subresource=None):
        raise NotFound("gone")


def stamp(obj):
    obj["metadata"]["resourceVersion"] = str(next(REVISIONS))
    return obj


def node(name, cpu="2", ready="True", **spec):
    return stamp({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"zone": name}},
                  "spec": spec, "status": {"allocatable": {"cpu": cpu, "memory": "4Gi", "pods": "110"},
                                           "conditions": [{"type": "Ready", "status": ready}]}})


def pod(name, cpu=None, node_name=None, scheduler="default-scheduler", **spec):
    requests = {"cpu": cpu} if cpu else {}
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
           "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": requests}}],
                    "schedulerName": scheduler, **spec},
           "status": {"phase": "Pending"}}
    if node_name:
        obj["spec"]["nodeName"] = node_name
    return stamp(obj)


def revise(obj, **fields):
    """A later version of ``obj`` with ``fields`` replaced at the top level."""
    return stamp({**copy.deepcopy(obj), **copy.deepcopy(fields)})


def event(event_type, obj):
    return {"type": event_type, "object": obj}


@pytest.fixture
def api():
    return FakeApi()


def make_scheduler(api, strategy="RoundRobin", nodes=()):
    scheduler = Scheduler(api, SchedulerSettings(strategy=strategy))
    for item in nodes:
        scheduler.nodes.handle_event(event("ADDED", item))
    return scheduler


def drain(scheduler):
    """Sync every key that is ready now, and wait for the bindings handed to the pool."""
    while scheduler.controller.process_next(timeout=0):
        pass
    assert scheduler.binder.join(timeout=10)


def test_pods_are_bound_round_robin_with_a_scheduled_event(api):
    scheduler = make_scheduler(api, nodes=[node("a"), node("b"), node("c")])
    for index in range(4):
        scheduler.pods.handle_event(event("ADDED", pod(f"p{index}")))
    drain(scheduler)
    assert sorted(api.bindings) == [("p0", "a"), ("p1", "b"), ("p2", "c"), ("p3", "a")]
    scheduled = {item["involvedObject"]["name"]: item for item in api.events if item["reason"] == "Scheduled"}
    assert scheduled["p0"]["message"] == "Successfully assigned ns/p0 to a"
    assert scheduled["p0"]["source"] == {"component": "default-scheduler"}
    assert len(scheduled) == 4


def test_a_burst_counts_assumed_pods_before_the_watch_catches_up(api):
    scheduler = make_scheduler(api, "LeastCPU", nodes=[node("a"), node("b"), node("c")])
    for index in range(6):
        scheduler.pods.handle_event(event("ADDED", pod(f"p{index}", cpu="1")))
    drain(scheduler)
    placed = [target for _, target in api.bindings]
    assert sorted(placed) == ["a", "a", "b", "b", "c", "c"]
    scheduler.pods.handle_event(event("ADDED", pod("extra", cpu="1")))
    drain(scheduler)
    assert len(api.bindings) == 6
    failed = [item for item in api.events if item["reason"] == "FailedScheduling"]
    assert failed[0]["message"] == "0/3 nodes are available: 3 Insufficient cpu."
    assert failed[0]["type"] == "Warning"


def test_an_unschedulable_pod_gets_the_condition_and_comes_back_after_back_off(api):
    scheduler = make_scheduler(api, nodes=[node("a", cpu="1")])
    big = pod("big", cpu="2")
    scheduler.pods.handle_event(event("ADDED", big))
    drain(scheduler)
    assert api.bindings == []
    name, patch = api.status_patches[0]
    assert name == "big"
    assert patch["metadata"] == {"resourceVersion": big["metadata"]["resourceVersion"]}
    condition = patch["status"]["conditions"][0]
    assert (condition["type"], condition["status"], condition["reason"]) == ("PodScheduled", "False", "Unschedulable")
    assert condition["message"] == "0/1 nodes are available: 1 Insufficient cpu."
    assert scheduler.controller.queue.num_requeues("ns/big") == 1
    assert len(scheduler.controller.queue) == 0, "the retry waits for its back-off"
    assert scheduler.controller.queue.delayed == 1


def test_our_own_status_write_does_not_cut_the_back_off_short(api):
    scheduler = make_scheduler(api, nodes=[node("a", cpu="1")])
    big = pod("big", cpu="2")
    scheduler.pods.handle_event(event("ADDED", big))
    drain(scheduler)
    condition = api.status_patches[0][1]["status"]["conditions"][0]
    marked = revise(big, status={"phase": "Pending", "conditions": [condition]})
    scheduler.pods.handle_event(event("MODIFIED", marked))
    assert len(scheduler.controller.queue) == 0


def test_a_node_change_retries_pending_pods_at_once_but_a_heartbeat_does_not(api):
    small = node("a", cpu="1")
    scheduler = make_scheduler(api, nodes=[small])
    scheduler.pods.handle_event(event("ADDED", pod("big", cpu="2")))
    drain(scheduler)
    heartbeat = revise(small, status={**small["status"], "nodeInfo": {"bootID": "x"}})
    scheduler.nodes.handle_event(event("MODIFIED", heartbeat))
    assert len(scheduler.controller.queue) == 0
    scheduler.nodes.handle_event(event("ADDED", node("b", cpu="4")))
    assert len(scheduler.controller.queue) == 1
    drain(scheduler)
    assert api.bindings == [("big", "b")]


def test_a_deleted_bound_pod_makes_room_for_pending_ones(api):
    scheduler = make_scheduler(api, nodes=[node("a", cpu="1")])
    running = pod("running", cpu="1", node_name="a")
    scheduler.pods.handle_event(event("ADDED", running))
    scheduler.pods.handle_event(event("ADDED", pod("waiting", cpu="1")))
    drain(scheduler)
    assert api.bindings == []
    scheduler.pods.handle_event(event("DELETED", revise(running)))
    drain(scheduler)
    assert api.bindings == [("waiting", "a")]


def test_the_bound_pod_seen_replaces_the_assumption(api):
    scheduler = make_scheduler(api, nodes=[node("a")])
    pending = pod("p", cpu="1")
    scheduler.pods.handle_event(event("ADDED", pending))
    drain(scheduler)
    assert scheduler.cache.is_assumed("ns/p")
    scheduler.pods.handle_event(event("MODIFIED", revise(pending, spec={**pending["spec"], "nodeName": "a"})))
    assert not scheduler.cache.is_assumed("ns/p")
    assert scheduler.cache.snapshot()["a"].pods == 1


def test_an_assumed_pod_is_not_bound_twice(api):
    scheduler = make_scheduler(api, nodes=[node("a")])
    pending = pod("p")
    scheduler.pods.handle_event(event("ADDED", pending))
    drain(scheduler)
    scheduler.controller.enqueue("ns/p")  # a resync before the binding is seen
    drain(scheduler)
    assert api.bindings == [("p", "a")]


def test_a_pod_is_never_bound_twice_while_its_binding_is_in_flight(api):
    scheduler = make_scheduler(api, nodes=[node("a"), node("b")])
    release = threading.Event()
    posting = api.request

    def slow_request(method, path, **kwargs):
        assert release.wait(10)
        return posting(method, path, **kwargs)

    api.request = slow_request
    scheduler.pods.handle_event(event("ADDED", pod("p")))
    assert scheduler.controller.process_next(timeout=0)
    for _ in range(3):  # resyncs while the binding is on its way
        scheduler.controller.enqueue("ns/p")
        assert scheduler.controller.process_next(timeout=0)
    release.set()
    drain(scheduler)
    assert api.bindings == [("p", "a")]


@pytest.mark.parametrize("error", [Conflict('pod p is already assigned to node "b"'), NotFound('pods "p" not found')])
def test_a_binding_refused_for_good_is_dropped_and_the_assumption_forgotten(api, error):
    scheduler = make_scheduler(api, nodes=[node("a")])
    api.binding_errors.append(error)
    scheduler.pods.handle_event(event("ADDED", pod("p", cpu="1")))
    drain(scheduler)
    assert not scheduler.cache.is_assumed("ns/p")
    assert scheduler.cache.snapshot() == {}
    assert scheduler.controller.queue.delayed == 0 and len(scheduler.controller.queue) == 0


@pytest.mark.parametrize("error", [ConnectionFailed("refused"), Conflict("the object has been modified")])
def test_a_failed_binding_is_retried(api, error):
    scheduler = make_scheduler(api, nodes=[node("a")])
    api.binding_errors.append(error)
    scheduler.pods.handle_event(event("ADDED", pod("p", cpu="1")))
    drain(scheduler)
    assert not scheduler.cache.is_assumed("ns/p")
    assert api.bindings == []
    assert scheduler.controller.queue.delayed == 1, "the retry waits for its back-off"
    assert scheduler.controller.process_next(timeout=5)
    drain(scheduler)
    assert api.bindings == [("p", "a")]


def test_pods_for_other_schedulers_are_left_alone(api):
    scheduler = make_scheduler(api, nodes=[node("a")])
    scheduler.pods.handle_event(event("ADDED", pod("mine")))
    scheduler.pods.handle_event(event("ADDED", pod("theirs", scheduler="other")))
    drain(scheduler)
    assert api.bindings == [("mine", "a")]


# --- the pure pieces ------------------------------------------------------------------------------------


def test_which_pods_want_scheduling():
    assert wants_scheduling(pod("p"), "default-scheduler")
    unnamed = pod("p")
    del unnamed["spec"]["schedulerName"]
    assert wants_scheduling(unnamed, "default-scheduler")
    assert not wants_scheduling(pod("p", node_name="a"), "default-scheduler")
    assert not wants_scheduling(pod("p", scheduler="other"), "default-scheduler")
    deleting = pod("p")
    deleting["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    assert not wants_scheduling(deleting, "default-scheduler")
    for phase in ("Succeeded", "Failed"):
        assert not wants_scheduling({**pod("p"), "status": {"phase": phase}}, "default-scheduler")


def test_which_changes_call_for_another_look():
    old = pod("p")
    assert pod_changed_for_scheduling(old, dict(old)), "a resync"
    assert not pod_changed_for_scheduling(old, revise(old, status={"phase": "Pending", "conditions": []}))
    assert pod_changed_for_scheduling(old, revise(old, spec={**old["spec"], "nodeSelector": {"a": "b"}}))
    nodes = NodeCache()
    base = node("a")
    assert nodes.update(base), "a new node"
    assert not nodes.update(revise(base, status={**base["status"], "nodeInfo": {}})), "a heartbeat"
    assert nodes.update(revise(base, spec={"unschedulable": True}))
    assert nodes.update(node("a", ready="False"))
    assert [item.name for item in nodes.nodes()] == ["a"]


def test_binding_body():
    assert binding(pod("p"), "n1") == {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
                                       "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}


def test_unschedulable_condition_is_written_once_per_message_and_keeps_its_transition_time():
    fresh = unschedulable_condition(pod("p"), "0/1 nodes are available: 1 Insufficient cpu.", "T1")
    assert fresh == {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "message": "0/1 nodes are available: 1 Insufficient cpu.", "lastTransitionTime": "T1"}
    marked = {**pod("p"), "status": {"conditions": [fresh]}}
    assert unschedulable_condition(marked, fresh["message"], "T2") is None
    changed = unschedulable_condition(marked, "0/2 nodes are available: 2 Insufficient cpu.", "T2")
    assert changed is not None and changed["lastTransitionTime"] == "T1"


def test_unknown_strategy_is_refused():
    with pytest.raises(ValueError, match="RoundRobin"):
        SchedulerSettings(strategy="Fastest")
