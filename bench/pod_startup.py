"""Pod startup latency on the installed cluster, against a bare ``docker run`` of the same image.

Creates N pods at once (default 30) in a fresh namespace and measures, per pod, the
time from its create request to the watch event showing it Running with every
container started. In the same run it times ``docker run -d`` of the same image N
times. Prints p50/p99 of both and their ratio (targets: p99 <= 2 s and <= 3x bare
Docker). Uses root's kubeconfig (``~/.kube/config``) as ``scripts/cluster-up.sh``
writes it, and the local Docker.

    .venv/bin/python bench/pod_startup.py [--pods 30] [--image busybox]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.stats import header, percentile, row  # noqa: E402
from daemons.api.client import ApiClient  # noqa: E402
from daemons.api.resources import resolve  # noqa: E402

PODS = resolve("pods")
NAMESPACES = resolve("namespaces")


def started(pod: dict) -> bool:
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    wanted = len(pod.get("spec", {}).get("containers") or [])
    return status.get("phase") == "Running" and len(containers) == wanted and all(
        "running" in (container.get("state") or {}) for container in containers)


def measure_pods(client: ApiClient, namespace: str, count: int, image: str, timeout: float) -> list[float]:
    created: dict[str, float] = {}
    running: dict[str, float] = {}
    done = threading.Event()
    version = client.list(PODS, namespace)["metadata"]["resourceVersion"]

    def follow() -> None:
        for event in client.watch(PODS, namespace, resource_version=version, timeout_seconds=int(timeout)):
            pod = event["object"]
            name = pod["metadata"]["name"]
            if name not in running and started(pod):
                running[name] = time.perf_counter()
                if len(running) == count:
                    done.set()
                    return

    watcher = threading.Thread(target=follow, daemon=True)
    watcher.start()

    def create(index: int) -> None:
        name = f"startup-{index}"
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "main", "image": image, "command": ["sleep", "3600"]}]}}
        created[name] = time.perf_counter()
        with ApiClient(client.connection) as own:
            own.create(PODS, body, namespace)

    with ThreadPoolExecutor(max_workers=min(count, 16)) as pool:
        list(pool.map(create, range(count)))
    if not done.wait(timeout):
        raise SystemExit(f"only {len(running)} of {count} pods were Running after {timeout:.0f} s")
    return [running[name] - created[name] for name in created]


def measure_docker(count: int, image: str) -> list[float]:
    """``docker run -d`` of ``count`` containers at once, as the pods are created: each one's time to started."""
    label = f"minik8s-bench={uuid.uuid4().hex[:8]}"

    def run(_index: int) -> float:
        begin = time.perf_counter()
        subprocess.run(["docker", "run", "-d", "--label", label, image, "sleep", "3600"], check=True,
                       capture_output=True)
        return time.perf_counter() - begin

    try:
        with ThreadPoolExecutor(max_workers=min(count, 16)) as pool:
            durations = list(pool.map(run, range(count)))
    finally:
        ids = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={label}"], capture_output=True,
                             text=True).stdout.split()
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)
    return durations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=30)
    parser.add_argument("--image", default="busybox")
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args()
    client = ApiClient.from_config()
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    try:
        pods = measure_pods(client, namespace, args.pods, args.image, args.timeout)
    finally:
        client.delete_collection(PODS, namespace)
        client.delete(NAMESPACES, namespace)
    docker = measure_docker(args.pods, args.image)
    print(f"pod startup: {args.pods} pods of {args.image} created at once, create -> Running seen by watch\n")
    print(header())
    print(row("pod create -> Running", pods))
    print(row("bare docker run -d (at once)", docker))
    pod_p99, docker_p99 = percentile(pods, 99), percentile(docker, 99)
    ratio = pod_p99 / docker_p99
    print(f"\npod p99 {pod_p99:.2f} s: {'meets' if pod_p99 <= 2 else 'MISSES'} target <= 2 s; "
          f"ratio to docker run p99 ({docker_p99:.2f} s) = {ratio:.1f}x: "
          f"{'meets' if ratio <= 3 else 'MISSES'} target <= 3x")


if __name__ == "__main__":
    main()
