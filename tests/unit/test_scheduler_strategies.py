"""Choosing among fitting nodes: RoundRobin, Random, LeastPods, LeastCPU, LeastMemory; ties go by name."""

from __future__ import annotations

import random

import pytest

from daemons.scheduler.facts import node_info, pod_info
from daemons.scheduler.strategies import (
    STRATEGIES,
    StrategyState,
    least_cpu,
    least_memory,
    least_pods,
    random_node,
    round_robin,
)
from daemons.scheduler.usage import NodeUsage, Resources

pytestmark = pytest.mark.unit

GI = 2**30


def node(name, cpu="2", memory="4Gi"):
    return node_info({"metadata": {"name": name},
                      "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}})


def pod(cpu=None, memory=None):
    requests = {key: value for key, value in (("cpu", cpu), ("memory", memory)) if value}
    return pod_info({"metadata": {"name": "p", "namespace": "ns"},
                     "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": requests}}]}})


NODES = [node("c"), node("a"), node("b")]


def test_round_robin_goes_by_name_after_the_last_choice():
    state = StrategyState()
    chosen = []
    for _ in range(5):
        name = round_robin(pod(), NODES, {}, state)
        chosen.append(name)
        state = StrategyState(last_node=name)
    assert chosen == ["a", "b", "c", "a", "b"]


def test_round_robin_skips_nodes_that_do_not_fit_this_time():
    assert round_robin(pod(), [node("a"), node("c")], {}, StrategyState(last_node="a")) == "c"
    assert round_robin(pod(), [node("a"), node("b")], {}, StrategyState(last_node="b")) == "a"
    assert round_robin(pod(), [node("a"), node("c")], {}, StrategyState(last_node="gone")) == "a"


def test_random_picks_a_feasible_node_from_its_state():
    state = StrategyState(rng=random.Random(7))
    picks = {random_node(pod(), NODES, {}, state) for _ in range(50)}
    assert picks == {"a", "b", "c"}
    first = [random_node(pod(), NODES, {}, StrategyState(rng=random.Random(1))) for _ in range(3)]
    assert len(set(first)) == 1, "the same seed gives the same choice"


def test_least_pods_and_ties_by_name():
    usage = {"a": NodeUsage(Resources(), 3), "b": NodeUsage(Resources(), 1), "c": NodeUsage(Resources(), 1)}
    assert least_pods(pod(), NODES, usage, StrategyState()) == "b"
    assert least_pods(pod(), NODES, {}, StrategyState()) == "a"


def test_least_cpu_compares_shares_after_placing():
    nodes = [node("a", cpu="4"), node("b", cpu="2")]
    usage = {"a": NodeUsage(Resources(cpu=2000), 1), "b": NodeUsage(Resources(cpu=500), 1)}
    # a: (2000 + 1000) / 4000 = 0.75, b: (500 + 1000) / 2000 = 0.75 -> tie goes to a
    assert least_cpu(pod(cpu="1"), nodes, usage, StrategyState()) == "a"
    # a: 2100 / 4000 = 0.525, b: 600 / 2000 = 0.3
    assert least_cpu(pod(cpu="100m"), nodes, usage, StrategyState()) == "b"


def test_least_memory_compares_shares_after_placing():
    nodes = [node("a", memory="8Gi"), node("b", memory="2Gi")]
    usage = {"a": NodeUsage(Resources(memory=4 * GI), 1)}
    assert least_memory(pod(memory="1Gi"), nodes, usage, StrategyState()) == "b"  # 5/8 against 1/2
    assert least_memory(pod(memory="2Gi"), nodes, usage, StrategyState()) == "a"  # 6/8 against 2/2


def test_a_node_reporting_no_figure_counts_as_empty():
    bare = node_info({"metadata": {"name": "z"}, "status": {}})
    usage = {"a": NodeUsage(Resources(cpu=1), 1)}
    assert least_cpu(pod(cpu="1"), [node("a"), bare], usage, StrategyState()) == "z"


def test_every_strategy_is_registered_by_its_flag_name():
    assert set(STRATEGIES) == {"RoundRobin", "Random", "LeastPods", "LeastCPU", "LeastMemory"}
    for strategy in STRATEGIES.values():
        assert strategy(pod(), [node("only")], {}, StrategyState()) == "only"
