"""How fast the ReplicaSet controller converges on the installed cluster.

Two figures, in a fresh namespace with a ReplicaSet of busybox pods:
- scale-up: ``kubectl scale --replicas N`` (default 30) from 0, to N pods Running
  (per pod: from the command's start to the watch event showing it Running, and
  the time until the last one);
- replacement: a Running pod is deleted (grace period 0) and the time until the
  watch shows its replacement Running, over K kills (default 20) one after another,
  with the ReplicaSet back at a few replicas and the surplus pods' containers removed
  (each pod is two containers: pause and app). Target: replacement p99 <= 2 s.
Uses root's kubeconfig (``~/.kube/config``) as ``scripts/cluster-up.sh`` writes it, and the local Docker
(a one-node cluster on this machine).

    .venv/bin/python bench/controller_latency.py [--replicas 30] [--kills 20] [--kill-replicas 3]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.stats import header, percentile, row  # noqa: E402
from daemons.api.client import ApiClient  # noqa: E402
from daemons.api.resources import resolve  # noqa: E402
from daemons.kubelet.spec import LABEL_POD_NAMESPACE  # noqa: E402

PODS = resolve("pods")
REPLICASETS = resolve("replicasets")
NAMESPACES = resolve("namespaces")
TARGET_REPLACEMENT_P99_SECONDS = 2.0
NAME = "latency"


def started(pod: dict) -> bool:
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    return status.get("phase") == "Running" and bool(containers) and all(
        "running" in (container.get("state") or {}) for container in containers)


class RunningPods:
    """Follows the namespace's pods through a watch: when each was first seen Running, and which still exist."""

    def __init__(self, client: ApiClient, namespace: str) -> None:
        self.client, self.namespace = client, namespace
        self.running: dict[str, float] = {}
        self.alive: set[str] = set()  # not being deleted
        self.present: set[str] = set()  # not yet removed from the API (a terminating pod still is)
        self.changed = threading.Condition()
        version = client.list(PODS, namespace)["metadata"]["resourceVersion"]
        threading.Thread(target=self._follow, args=(version,), daemon=True).start()

    def _follow(self, version: str) -> None:
        with ApiClient(self.client.connection) as own:
            for event in own.watch(PODS, self.namespace, resource_version=version, timeout_seconds=3600):
                pod, now = event["object"], time.perf_counter()
                name = pod["metadata"]["name"]
                with self.changed:
                    if event["type"] == "DELETED":
                        self.present.discard(name)
                    else:
                        self.present.add(name)
                    if event["type"] == "DELETED" or pod["metadata"].get("deletionTimestamp"):
                        self.alive.discard(name)
                    else:
                        self.alive.add(name)
                        if name not in self.running and started(pod):
                            self.running[name] = now
                    self.changed.notify_all()

    def wait(self, condition, timeout: float, what: str) -> None:
        with self.changed:
            if not self.changed.wait_for(condition, timeout):
                raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")

    def alive_running(self) -> list[str]:
        return sorted(name for name in self.alive if name in self.running)


def wait_for_containers(namespace: str, count: int, timeout: float) -> None:
    """Wait until this machine's Docker holds exactly ``count`` containers of the namespace's pods: the kubelet
    removes a deleted pod's containers after the API has forgotten the pod."""
    deadline = time.monotonic() + timeout
    while len(subprocess.run(["docker", "ps", "-aq", "--filter", f"label={LABEL_POD_NAMESPACE}={namespace}"],
                             capture_output=True, text=True, check=True).stdout.split()) != count:
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for the surplus pods' containers to go")
        time.sleep(0.5)


def kubectl(*args: str) -> None:
    binary = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or "kubectl"
    subprocess.run([binary, *args], check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=30)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--kill-replicas", type=int, default=3)
    parser.add_argument("--image", default="busybox")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    client = ApiClient.from_config()
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    try:
        client.create(REPLICASETS, {
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": NAME},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": NAME}}, "template": {
                "metadata": {"labels": {"app": NAME}},
                "spec": {"terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "main", "image": args.image, "command": ["sleep", "3600"]}]}}},
        }, namespace)
        pods = RunningPods(client, namespace)

        began = time.perf_counter()
        kubectl("-n", namespace, "scale", "rs", NAME, "--replicas", str(args.replicas))
        pods.wait(lambda: len(pods.alive_running()) >= args.replicas, args.timeout,
                  f"{args.replicas} pods Running")
        scale_up = [pods.running[name] - began for name in pods.alive_running()]

        kubectl("-n", namespace, "scale", "rs", NAME, "--replicas", str(args.kill_replicas))
        pods.wait(lambda: len(pods.present) == args.kill_replicas and len(pods.alive_running()) == args.kill_replicas,
                  args.timeout, f"the ReplicaSet back at {args.kill_replicas} Running pods")
        # The surplus pods' containers must be gone too, or their removal competes with the replacements.
        wait_for_containers(namespace, 2 * args.kill_replicas, args.timeout)
        replacements = []
        for _ in range(args.kills):
            before = set(pods.alive_running())
            victim = sorted(before)[0]
            killed = time.perf_counter()
            client.delete(PODS, victim, namespace, grace_period_seconds=0)
            pods.wait(lambda before=before: len(set(pods.alive_running()) - before) >= 1, args.timeout,
                      f"a replacement for {victim}")
            newcomer = next(iter(set(pods.alive_running()) - before))
            replacements.append(pods.running[newcomer] - killed)
            pods.wait(lambda victim=victim: victim not in pods.present, args.timeout, f"{victim} to be gone")
    finally:
        client.delete(NAMESPACES, namespace)

    print(f"controller latency: ReplicaSet of {args.image} pods on {namespace}\n")
    print(header())
    print(row(f"scale 0 -> {args.replicas}: pod Running", scale_up))
    print(row("pod deleted -> replacement Running", replacements))
    p99 = percentile(replacements, 99)
    print(f"\nscale 0 -> {args.replicas}: all Running after {max(scale_up):.2f} s")
    print(f"replacement p99 {p99:.2f} s: {'meets' if p99 <= TARGET_REPLACEMENT_P99_SECONDS else 'MISSES'} "
          f"target <= {TARGET_REPLACEMENT_P99_SECONDS:.0f} s")


if __name__ == "__main__":
    main()
