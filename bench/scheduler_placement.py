"""Scheduler placement benchmark: the pure placement path (facts, filters, strategy, assumption), no HTTP.

Builds a scheduler over fake hollow-like nodes (4 cpu, 16Gi, 110 pods, Ready) and
places pods one after another exactly as a scheduling worker does, without
binding them, then prints the pods placed per second for each node count,
strategy and ``--percentage-of-nodes-to-score``:

    .venv/bin/python bench/scheduler_placement.py [--nodes 1000,5000] [--pods 2000]
        [--strategies RoundRobin,LeastPods] [--percentages 0,100] [--profile]

``--profile`` also runs cProfile over the first case and prints the functions taking the most time.
The figures are printed; nothing passes or fails on them.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from daemons.scheduler.scheduler import Scheduler  # noqa: E402
from daemons.scheduler.settings import SchedulerSettings  # noqa: E402

NAMESPACE = "bench"


def fake_node(index: int) -> dict:
    name = f"hollow-{index:04d}"
    offered = {"cpu": "4", "memory": "16Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "resourceVersion": str(index + 1),
                         "labels": {"kubernetes.io/hostname": name, "zone": f"zone-{index % 3}"}},
            "spec": {}, "status": {"allocatable": offered, "capacity": offered,
                                   "conditions": [{"type": "Ready", "status": "True"},
                                                  {"type": "MemoryPressure", "status": "False"}]}}


def fake_pod(index: int) -> dict:
    requests = {"cpu": "10m", "memory": "16Mi"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"pod-{index}", "namespace": NAMESPACE, "uid": f"uid-{index}"},
            "spec": {"schedulerName": "default-scheduler",
                     "containers": [{"name": "main", "image": "busybox", "resources": {"requests": requests}}]}}


def placer(nodes: int, strategy: str, percentage: int) -> Scheduler:
    """A scheduler whose node cache holds ``nodes`` fake nodes; never started, so nothing is sent anywhere."""
    scheduler = Scheduler(None, SchedulerSettings(strategy=strategy,  # type: ignore[arg-type]
                                                  percentage_of_nodes_to_score=percentage))
    for index in range(nodes):
        scheduler.node_cache.update(fake_node(index))
    return scheduler


def place_all(scheduler: Scheduler, pods: list[dict]) -> float:
    """Place every pod; the pods placed per second."""
    started = time.perf_counter()
    for pod in pods:
        node, message = scheduler.place(f"{NAMESPACE}/{pod['metadata']['name']}", pod)
        if node is None:
            raise SystemExit(f"{pod['metadata']['name']} placed nowhere: {message}")
    return len(pods) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1000,5000", help="node counts, comma-separated")
    parser.add_argument("--pods", type=int, default=2000, help="pods placed per case")
    parser.add_argument("--strategies", default="RoundRobin,LeastPods", help="strategies, comma-separated")
    parser.add_argument("--percentages", default="0,100", help="values of --percentage-of-nodes-to-score")
    parser.add_argument("--profile", action="store_true", help="cProfile the first case and print the top functions")
    args = parser.parse_args()
    pods = [fake_pod(index) for index in range(args.pods)]
    cases = [(int(nodes), strategy, int(percentage)) for nodes in args.nodes.split(",")
             for strategy in args.strategies.split(",") for percentage in args.percentages.split(",")]
    print(f"{'nodes':>6} {'strategy':<12} {'%score':>6} {'pods/s':>10}")
    for nodes, strategy, percentage in cases:
        rate = place_all(placer(nodes, strategy, percentage), pods)
        print(f"{nodes:>6} {strategy:<12} {percentage:>6} {rate:>10.1f}", flush=True)
    if args.profile:
        nodes, strategy, percentage = cases[0]
        scheduler = placer(nodes, strategy, percentage)
        profile = cProfile.Profile()
        profile.runcall(place_all, scheduler, pods)
        print(f"\ncProfile, {nodes} nodes, {strategy}, {percentage} %, {len(pods)} pods:")
        pstats.Stats(profile).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
