"""Judging a sample of a large cluster: how many fitting nodes to look for, the walk from a rotating start."""

from __future__ import annotations

import collections

import pytest

from daemons.scheduler.facts import node_info, pod_info
from daemons.scheduler.predicates import (
    INSUFFICIENT_CPU,
    NOT_READY,
    failure_message,
    feasible_nodes_to_find,
    filter_nodes,
)
from daemons.scheduler.scheduler import Scheduler
from daemons.scheduler.settings import SchedulerSettings

pytestmark = pytest.mark.unit


def node(index, cpu="4", ready="True"):
    name = f"n{index:04d}"
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "resourceVersion": "1"},
            "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": ready}]}}


def pod(name, cpu="100m"):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns", "uid": name},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]}}


@pytest.mark.parametrize(("total", "percentage", "expected"), [
    (0, 0, 0),
    (3, 0, 3),
    (99, 0, 99),  # a small cluster: every node
    (99, 10, 99),
    (100, 0, 100),  # 50 % would be 50: never under 100 nodes
    (200, 0, 100),  # 49 % of 200 is 98
    (1000, 0, 420),  # 50 - 1000/125 = 42 %
    (5000, 0, 500),  # 50 - 40 = 10 %
    (6000, 0, 300),  # 50 - 48 = 2 %, raised to 5 %
    (100_000, 0, 5000),
    (1000, 100, 1000),
    (1000, 10, 100),
    (5000, 30, 1500),
    (5000, 1, 100),
])
def test_how_many_fitting_nodes_to_look_for(total, percentage, expected):
    assert feasible_nodes_to_find(total, percentage) == expected


def test_the_walk_starts_where_asked_wraps_around_and_stops_once_enough_fit():
    nodes = [node_info(node(index)) for index in range(10)]
    found = filter_nodes(pod_info(pod("p")), nodes, {}, start=8, wanted=4)
    assert [item.name for item in found.feasible] == ["n0008", "n0009", "n0000", "n0001"]
    assert found.refusals == {}


def test_refused_nodes_are_counted_only_as_far_as_the_walk_went():
    nodes = [node_info(node(index, ready="True" if index % 2 else "False")) for index in range(10)]
    found = filter_nodes(pod_info(pod("p")), nodes, {}, start=0, wanted=2)
    assert [item.name for item in found.feasible] == ["n0001", "n0003"]
    assert found.refusals == {NOT_READY: 2}


def test_a_pod_that_fits_nowhere_is_judged_against_every_node():
    nodes = [node_info(node(index, cpu="1", ready="False" if index < 3 else "True")) for index in range(300)]
    found = filter_nodes(pod_info(pod("big", cpu="2")), nodes, {}, start=150,
                         wanted=feasible_nodes_to_find(300, 0))
    assert found.feasible == []
    assert failure_message(len(nodes), found.refusals) == (
        "0/300 nodes are available: 297 Insufficient cpu, 3 node(s) were not ready.")


def test_fewer_fitting_than_wanted_means_every_node_was_judged():
    nodes = [node_info(node(index, cpu="1" if index != 7 else "4")) for index in range(10)]
    found = filter_nodes(pod_info(pod("p", cpu="2")), nodes, {}, start=3, wanted=5)
    assert [item.name for item in found.feasible] == ["n0007"]
    assert found.refusals == {INSUFFICIENT_CPU: 9}


def placer(nodes, strategy, percentage=0):
    scheduler = Scheduler(None, SchedulerSettings(strategy=strategy, percentage_of_nodes_to_score=percentage))
    for index in range(nodes):
        scheduler.node_cache.update(node(index))
    return scheduler


@pytest.mark.parametrize("strategy", ["RoundRobin", "LeastPods", "LeastCPU"])
def test_sampled_placements_go_round_the_whole_cluster(strategy):
    """500 nodes, each pod judged against about 200 of them: 500 pods still land one on each node."""
    scheduler = placer(500, strategy)
    placed = collections.Counter(scheduler.place(f"ns/p{index}", pod(f"p{index}"))[0] for index in range(500))
    assert len(placed) == 500 and set(placed.values()) == {1}


def test_round_robin_over_a_sample_keeps_its_order_by_name():
    scheduler = placer(300, "RoundRobin")
    chosen = [scheduler.place(f"ns/p{index}", pod(f"p{index}"))[0] for index in range(301)]
    assert chosen[:3] == ["n0000", "n0001", "n0002"]
    assert chosen[299:] == ["n0299", "n0000"]


def test_a_full_node_is_passed_over_by_the_next_walks():
    scheduler = placer(200, "RoundRobin")
    scheduler.cache.assume("ns/hog", "n0001", pod_info(pod("hog", cpu="4")).requests)
    chosen = [scheduler.place(f"ns/p{index}", pod(f"p{index}"))[0] for index in range(3)]
    assert chosen == ["n0000", "n0002", "n0003"]


def test_every_node_is_judged_when_asked_for_100_percent():
    scheduler = placer(300, "LeastPods", percentage=100)
    for index in range(299):
        scheduler.cache.assume(f"ns/old{index}", f"n{index:04d}", pod_info(pod("old")).requests)
    assert scheduler.place("ns/p", pod("p"))[0] == "n0299"
