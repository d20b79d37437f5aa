"""What pods request (containers summed, init containers by the max rule), what nodes offer, and the usage cache."""

from __future__ import annotations

import pytest

from daemons.scheduler.cache import UsageCache
from daemons.scheduler.usage import (
    Allocatable,
    NodeUsage,
    Resources,
    container_requests,
    counts_against_node,
    node_allocatable,
    pod_requests,
)

pytestmark = pytest.mark.unit

MI = 2**20


def container(name="c", requests=None, limits=None):
    resources = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "busybox", "resources": resources}


def pod(name="p", containers=(), init=(), node="", phase=None, namespace="ns"):
    obj = {"metadata": {"name": name, "namespace": namespace},
           "spec": {"containers": list(containers) or [container()], "initContainers": list(init)}}
    if node:
        obj["spec"]["nodeName"] = node
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def test_container_requests_in_millicores_and_bytes():
    assert container_requests(container(requests={"cpu": "250m", "memory": "64Mi"})) == Resources(250, 64 * MI)
    assert container_requests(container(requests={"cpu": "0.5"})) == Resources(500, 0)
    assert container_requests({"name": "c", "image": "x"}) == Resources()


def test_a_limit_without_a_request_is_the_request():
    only_limits = container(limits={"cpu": "1", "memory": "128Mi"})
    assert container_requests(only_limits) == Resources(1000, 128 * MI)
    both = container(requests={"cpu": "100m"}, limits={"cpu": "1", "memory": "128Mi"})
    assert container_requests(both) == Resources(100, 128 * MI)


def test_containers_add_up():
    two = pod(containers=[container("a", {"cpu": "100m", "memory": "64Mi"}), container("b", {"cpu": "200m"})])
    assert pod_requests(two) == Resources(300, 64 * MI)


def test_init_containers_count_by_the_max_rule_per_resource():
    app = [container("a", {"cpu": "100m", "memory": "64Mi"}), container("b", {"cpu": "100m", "memory": "64Mi"})]
    init = [container("i1", {"cpu": "500m", "memory": "16Mi"}), container("i2", {"cpu": "50m", "memory": "100Mi"})]
    # cpu: max(200, 500, 50) = 500; memory: max(128Mi, 16Mi, 100Mi) = 128Mi
    assert pod_requests(pod(containers=app, init=init)) == Resources(500, 128 * MI)


def test_node_allocatable_falls_back_to_capacity_per_resource():
    node = {"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                                                   "allocatable": {"cpu": "3500m"}}}
    assert node_allocatable(node) == Allocatable(3500, 8 * 2**30, 110)
    assert node_allocatable({"metadata": {"name": "n"}}) == Allocatable(None, None, None)


def test_only_bound_unfinished_pods_hold_resources():
    assert counts_against_node(pod(node="n1"))
    assert counts_against_node(pod(node="n1", phase="Running"))
    assert not counts_against_node(pod())
    assert not counts_against_node(pod(node="n1", phase="Succeeded"))
    assert not counts_against_node(pod(node="n1", phase="Failed"))


# --- the cache ------------------------------------------------------------------------------------------

def cpu_pod(name, cpu, **kwargs):
    return pod(name, containers=[container(requests={"cpu": cpu})], **kwargs)


def test_bound_pods_are_summed_per_node():
    cache = UsageCache()
    assert not cache.observe(cpu_pod("a", "100m", node="n1"))
    assert not cache.observe(cpu_pod("b", "200m", node="n1"))
    assert not cache.observe(cpu_pod("c", "1", node="n2"))
    assert not cache.observe(cpu_pod("pending", "1"))
    assert cache.snapshot() == {"n1": NodeUsage(Resources(300, 0), 2), "n2": NodeUsage(Resources(1000, 0), 1)}


def test_an_assumed_pod_counts_until_it_is_seen_bound():
    cache = UsageCache()
    cache.assume("ns/a", "n1", Resources(500, 0))
    assert cache.is_assumed("ns/a")
    assert cache.snapshot() == {"n1": NodeUsage(Resources(500, 0), 1)}
    cache.observe(cpu_pod("a", "500m"))  # an update of the pod from before the binding
    assert cache.is_assumed("ns/a")
    cache.observe(cpu_pod("a", "500m", node="n1"))
    assert not cache.is_assumed("ns/a")
    assert cache.snapshot() == {"n1": NodeUsage(Resources(500, 0), 1)}, "counted once"


def test_a_failed_binding_drops_the_assumption():
    cache = UsageCache()
    cache.assume("ns/a", "n1", Resources(500, 0))
    cache.forget("ns/a")
    assert cache.snapshot() == {}
    assert not cache.is_assumed("ns/a")


def test_finished_and_deleted_pods_free_their_room():
    cache = UsageCache()
    cache.observe(cpu_pod("a", "1", node="n1"))
    cache.observe(cpu_pod("b", "1", node="n1"))
    assert cache.observe(cpu_pod("a", "1", node="n1", phase="Succeeded"))
    assert cache.snapshot() == {"n1": NodeUsage(Resources(1000, 0), 1)}
    assert cache.remove(cpu_pod("b", "1", node="n1"))
    assert cache.snapshot() == {}
    assert not cache.remove(cpu_pod("never-seen", "1"))


def test_an_assumed_pod_seen_finished_frees_its_room():
    cache = UsageCache()
    cache.assume("ns/a", "n1", Resources(500, 0))
    assert cache.observe(cpu_pod("a", "500m", node="n1", phase="Failed"))
    assert cache.snapshot() == {}
