"""Node loss on the installed cluster: from a worker's last heartbeat to its pods' replacements Running.

Joins a second node to the cluster: one more ``minik8s-kubelet`` on this machine, with the
default heartbeat interval, its own node name and the local Docker. Each run cordons the
installed node, creates a Deployment whose pods land on the second node, uncordons, then
SIGKILLs that kubelet: its heartbeats stop while its containers keep running, as on a
machine that dropped off the network. It times, by watch:

- node NotReady: until the node lifecycle controller marks the node Unknown;
- evicted: until the first of the node's pods is marked for deletion;
- replaced: until every replica runs again on the installed node (the figure of the target).

Then it starts the kubelet again and waits until the node is Ready, its evicted pods are
gone and none of its containers is left. The control plane runs with its installed
settings (defaults: 40 s grace period, 30 s eviction timeout). Prints p50 over the runs
(default 5; target p50 <= 90 s). Uses root's kubeconfig (``~/.kube/config``).

    .venv/bin/python bench/node_loss.py [--runs 5] [--replicas 3] [--image busybox]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from daemons.api.client import ApiClient  # noqa: E402
from daemons.api.errors import NotFound  # noqa: E402
from daemons.api.resources import resolve  # noqa: E402
from daemons.kubelet.spec import LABEL_NODE  # noqa: E402

KUBECONFIG = Path.home() / ".kube" / "config"
PODS = resolve("pods")
NODES = resolve("nodes")
NAMESPACES = resolve("namespaces")
DEPLOYMENTS = resolve("deployments")
SECOND_NODE_PREFIX = "bench-worker-"
Obj = dict[str, Any]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class SecondNode:
    """One more kubelet on this machine, for a node of its own that the bench can lose and bring back."""

    def __init__(self, workdir: Path) -> None:
        self.name = f"{SECOND_NODE_PREFIX}{secrets.token_hex(3)}"
        self.workdir = workdir
        (workdir / "node.yaml").write_text(yaml.safe_dump({"name": self.name, "roles": ["worker"],
                                                            "address": "127.0.0.1"}))
        (workdir / "tokens").write_text(f"{secrets.token_hex(16)}\n")
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        script = Path(sys.executable).with_name("minik8s-kubelet")
        log = (self.workdir / "kubelet.log").open("ab")
        self.process = subprocess.Popen(
            [str(script), "--node-config", str(self.workdir / "node.yaml"), "--kubeconfig", str(KUBECONFIG),
             "--root-dir", str(self.workdir / "root"), "--bind-address", "127.0.0.1", "--port", str(self.port),
             "--authentication-token-file", str(self.workdir / "tokens")],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        """SIGKILL: no last status, no stopping of containers."""
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            self.process = None


def get_node(client: ApiClient, name: str) -> Obj | None:
    with contextlib.suppress(NotFound):
        return client.get(NODES, name)
    return None


def node_ready(node: Obj | None) -> str:
    conditions = ((node or {}).get("status") or {}).get("conditions") or []
    return next((c.get("status", "") for c in conditions if c.get("type") == "Ready"), "")


def wait(what: str, condition: Callable[[], Any], timeout: float) -> float:
    """Poll ``condition`` every 0.2 s; the moment it held, as ``time.monotonic()``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.2)
    return time.monotonic()


def deployment(name: str, replicas: int, image: str) -> Obj:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"terminationGracePeriodSeconds": 1,
                                           "containers": [{"name": "main", "image": image,
                                                           "command": ["sleep", "3600"]}]}}}}


def running(pod: Obj) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp") and all(
        "running" in (c.get("state") or {}) for c in status.get("containerStatuses") or [])


class Bench:
    def __init__(self, client: ApiClient, second: SecondNode, namespace: str, replicas: int, image: str) -> None:
        self.client = client
        self.second = second
        self.namespace = namespace
        self.replicas = replicas
        self.image = image
        self.docker = docker.from_env()
        self.home = next(node["metadata"]["name"] for node in client.list(NODES)["items"]
                         if not node["metadata"]["name"].startswith(SECOND_NODE_PREFIX) and node_ready(node) == "True")

    def pods(self, app: str) -> list[Obj]:
        return self.client.list(PODS, self.namespace, label_selector=f"app={app}")["items"]

    def cordon(self, unschedulable: bool) -> None:
        self.client.patch(NODES, self.home, {"spec": {"unschedulable": unschedulable}})

    def second_node(self) -> Obj | None:
        return get_node(self.client, self.second.name)

    def leftovers(self) -> list[str]:
        """Containers the second node still has that belong to no pod bound to it."""
        bound = {pod["metadata"]["uid"] for pod in self.client.list(PODS, self.namespace)["items"]
                 if (pod.get("spec") or {}).get("nodeName") == self.second.name}
        containers = self.docker.containers.list(all=True, filters={"label": f"{LABEL_NODE}={self.second.name}"})
        return [c.name for c in containers if c.labels.get("io.minik8s.pod.uid") not in bound]

    def run_once(self, index: int) -> dict[str, float]:
        app = f"lossy-{index}"
        self.cordon(True)
        try:
            self.client.create(DEPLOYMENTS, deployment(app, self.replicas, self.image), self.namespace)
            wait("pods Running on the second node", lambda: sum(
                running(p) and p["spec"].get("nodeName") == self.second.name for p in self.pods(app))
                == self.replicas, 120)
        finally:
            self.cordon(False)
        self.second.kill()
        lost = time.monotonic()
        not_ready = wait("node NotReady", lambda: node_ready(self.second_node()) == "Unknown", 300)
        evicted = wait("first eviction", lambda: any(p["metadata"].get("deletionTimestamp")
                                                     for p in self.pods(app)), 300)
        replaced = wait("replacements Running", lambda: sum(
            running(p) and p["spec"].get("nodeName") == self.home for p in self.pods(app)) == self.replicas, 300)
        self.second.start()
        wait("node Ready again", lambda: node_ready(self.second_node()) == "True", 120)
        wait("evicted pods gone", lambda: all(p["spec"].get("nodeName") != self.second.name
                                              for p in self.pods(app)), 120)
        wait("no stray containers", lambda: not self.leftovers(), 120)
        self.client.delete(DEPLOYMENTS, app, self.namespace)
        return {"not_ready": not_ready - lost, "evicted": evicted - lost, "replaced": replaced - lost}


def cleanup(client: ApiClient, bench: Bench | None, second: SecondNode, namespace: str) -> None:
    """Leave the cluster as it was, each step on its own, so one that fails does not leave the others undone."""
    steps: list[Callable[[], Any]] = [
        lambda: bench.cordon(False) if bench is not None else None,
        lambda: [container.remove(force=True) for container in docker.from_env().containers.list(
            all=True, filters={"label": f"{LABEL_NODE}={second.name}"})],
        lambda: client.delete(NODES, second.name),
        lambda: client.delete(NAMESPACES, namespace),
    ]
    for step in steps:
        try:
            step()
        except Exception as error:
            print(f"cleanup: {error}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--image", default="busybox")
    args = parser.parse_args()

    client = ApiClient.from_config(KUBECONFIG)
    namespace = f"bench-loss-{uuid.uuid4().hex[:6]}"
    client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    with tempfile.TemporaryDirectory(prefix="node-loss-") as workdir:
        second = SecondNode(Path(workdir))
        second.start()
        bench: Bench | None = None
        try:
            wait("second node Ready", lambda: node_ready(get_node(client, second.name)) == "True", 60)
            bench = Bench(client, second, namespace, args.replicas, args.image)
            print(f"node loss: {args.runs} runs, {args.replicas} pods on {second.name}, replacements on {bench.home}")
            results = []
            for index in range(args.runs):
                figures = bench.run_once(index)
                results.append(figures)
                print(f"run {index + 1}: NotReady after {figures['not_ready']:.1f} s, first eviction "
                      f"{figures['evicted']:.1f} s, replacements Running {figures['replaced']:.1f} s", flush=True)
        finally:
            second.kill()
            cleanup(client, bench, second, namespace)
    for key, label in (("not_ready", "node NotReady"), ("evicted", "first pod evicted"),
                       ("replaced", "replacements Running")):
        samples = [figures[key] for figures in results]
        print(f"{label:<24} p50 {statistics.median(samples):6.1f} s   min {min(samples):6.1f} s   "
              f"max {max(samples):6.1f} s")
    p50 = statistics.median(figures["replaced"] for figures in results)
    print(f"target: replacements Running p50 <= 90 s: {'met' if p50 <= 90 else 'missed'} ({p50:.1f} s)")


if __name__ == "__main__":
    main()
