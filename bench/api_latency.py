"""API latency benchmark: pod create/get/update/list through the real HTTPS apiserver, against raw etcd puts.

Starts a private etcd and ``minik8s-apiserver`` (TLS + token auth) exactly as the test fixtures do, by reusing
the process classes of ``tests/conftest.py``, then times each request of a keep-alive httpx client:

    .venv/bin/python bench/api_latency.py [--count 1000] [--lists 20] [--amqp [URL]]

``--amqp`` alone also starts a private RabbitMQ so the apiserver publishes every change to the event bus, as in
a real cluster; ``--amqp URL`` uses a running one. Without it the apiserver runs with no event publisher.
The figures are printed; nothing passes or fails on them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import ssl
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aetcd
import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.stats import percentile  # noqa: E402
from tests.conftest import ApiServerProcess, EtcdProcess, RabbitMQProcess, make_pki  # noqa: E402

TARGET_WRITE_P99_MS = 20.0
TARGET_WRITE_RATIO = 5.0
NAMESPACE = "bench"


class BenchApiServer(ApiServerProcess):
    """The fixtures' apiserver process, with no ``--amqp-url`` at all when there is no event bus."""

    def command(self) -> list[str]:
        argv = super().command()
        if self.amqp_url is None:
            index = argv.index("--amqp-url")
            del argv[index:index + 2]
        return argv


# --- figures ----------------------------------------------------------------------------------------




def summary(samples: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples]
    return {
        "n": len(ms),
        "p50": percentile(ms, 50),
        "p90": percentile(ms, 90),
        "p99": percentile(ms, 99),
        "max": max(ms),
        "mean": sum(ms) / len(ms),
    }


def rss_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in KiB, from /proc/<pid>/status."""
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0])
    return found


def timed(samples: list[float], call: Callable[[], httpx.Response], expect: int) -> httpx.Response:
    start = time.perf_counter()
    response = call()
    samples.append(time.perf_counter() - start)
    if response.status_code != expect:
        raise SystemExit(f"{response.request.method} {response.request.url} answered {response.status_code} "
                         f"(expected {expect}): {response.text[:500]}")
    return response


# --- the workload -----------------------------------------------------------------------------------


def pod(name: str, index: int) -> dict:
    """A pod of typical size: labels, two containers with env, ports, resources and a probe."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": "bench", "shard": str(index % 10), "tier": "backend"},
            "annotations": {"bench.minik8s.io/index": str(index)},
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.local:5000/python-flask:1.0",
                    "command": ["python3", "-m", "flask", "run", "--host=0.0.0.0", "--port=8080"],
                    "env": [{"name": "FLASK_APP", "value": "app.py"}, {"name": "SHARD", "value": str(index % 10)}],
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "resources": {"limits": {"cpu": "500m", "memory": "256Mi"},
                                  "requests": {"cpu": "100m", "memory": "64Mi"}},
                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 5},
                },
                {"name": "sidecar", "image": "registry.local:5000/busybox:1.36", "command": ["sleep", "infinity"]},
            ],
            "restartPolicy": "Always",
        },
    }


def run_api_workload(server: ApiServerProcess, count: int, lists: int) -> tuple[dict[str, list[float]], int]:
    """Create, get, update (PUT) ``count`` pods one at a time, then list them all ``lists`` times."""
    context = ssl.create_default_context(cafile=server.ca_file)
    headers = {"Authorization": f"Bearer {server.admin_token}", "Accept": "application/json"}
    samples: dict[str, list[float]] = {"create": [], "get": [], "update": [], "list": []}
    with httpx.Client(base_url=server.url, headers=headers, verify=context, timeout=60) as http:
        response = http.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": NAMESPACE}})
        if response.status_code not in (201, 409):
            raise SystemExit(f"cannot create namespace {NAMESPACE}: {response.status_code} {response.text}")
        base = f"/api/v1/namespaces/{NAMESPACE}/pods"

        # Warm up the connection, TLS session and the server's code paths; not measured.
        for index in range(20):
            name = f"warmup-{index}"
            http.post(base, json=pod(name, index)).raise_for_status()
            http.get(f"{base}/{name}").raise_for_status()
            http.delete(f"{base}/{name}").raise_for_status()

        names = [f"pod-{index:05d}" for index in range(count)]
        for index, name in enumerate(names):
            timed(samples["create"], lambda n=name, i=index: http.post(base, json=pod(n, i)), 201)
        current: dict[str, dict] = {}
        for name in names:
            current[name] = timed(samples["get"], lambda n=name: http.get(f"{base}/{n}"), 200).json()
        for name in names:
            body = current[name]
            body["metadata"]["labels"]["updated"] = "true"
            timed(samples["update"], lambda n=name, b=body: http.put(f"{base}/{n}", json=b), 200)
        listed = 0
        for _ in range(lists):
            response = timed(samples["list"], lambda: http.get(base), 200)
            items = response.json()["items"]
            if len(items) != count:
                raise SystemExit(f"LIST returned {len(items)} pods, expected {count}")
            listed = len(response.content)
    return samples, listed


async def run_etcd_puts(etcd: EtcdProcess, count: int) -> tuple[list[float], int]:
    """Plain etcd puts, one at a time through aetcd, of the very bytes the apiserver stored for the pods.

    Returns the timings and the mean stored value size in bytes.
    """
    samples: list[float] = []
    async with aetcd.Client(host=etcd.host, port=etcd.port) as client:
        stored = [kv.value for kv in await client.get_prefix(f"/registry/pods/{NAMESPACE}/".encode())]
        if len(stored) != count:
            raise SystemExit(f"found {len(stored)} pods in etcd, expected {count}")
        for index in range(20):  # warm-up
            await client.put(f"/bench/warmup/{index}".encode(), stored[index % count])
        for index, value in enumerate(stored):
            key = f"/bench/raw/pod-{index:05d}".encode()
            start = time.perf_counter()
            await client.put(key, value)
            samples.append(time.perf_counter() - start)
    return samples, sum(len(value) for value in stored) // count


# --- report -----------------------------------------------------------------------------------------


def print_report(results: dict[str, dict[str, float]], value_size: int, list_bytes: int, count: int,
                 rss: dict[str, int], amqp: bool) -> None:
    print()
    print(f"minik8s API latency: {count} pods, stored value {value_size} B of JSON, "
          f"list response {list_bytes / 1024:.0f} KiB")
    print(f"host: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"event publisher {'on (RabbitMQ)' if amqp else 'off'}")
    print()
    print(f"{'operation':<28}{'n':>6}{'p50 ms':>10}{'p90 ms':>10}{'p99 ms':>10}{'max ms':>10}{'mean ms':>10}")
    labels = {
        "create": "create (POST)",
        "get": "get (GET)",
        "update": "update (PUT)",
        "list": f"list all {count} (GET)",
        "etcd": "raw etcd put (aetcd)",
    }
    for key, label in labels.items():
        row = results[key]
        print(f"{label:<28}{row['n']:>6}{row['p50']:>10.2f}{row['p90']:>10.2f}{row['p99']:>10.2f}"
              f"{row['max']:>10.2f}{row['mean']:>10.2f}")
    print()
    etcd_p99 = results["etcd"]["p99"]
    for key in ("create", "update"):
        p99 = results[key]["p99"]
        ratio = p99 / etcd_p99 if etcd_p99 else float("inf")
        within_ms = "meets" if p99 <= TARGET_WRITE_P99_MS else "MISSES"
        within_ratio = "meets" if ratio <= TARGET_WRITE_RATIO else "MISSES"
        print(f"{key} p99 {p99:.2f} ms: {within_ms} target <= {TARGET_WRITE_P99_MS:.0f} ms; "
              f"ratio to raw etcd put p99 ({etcd_p99:.2f} ms) = {ratio:.1f}x: {within_ratio} target <= "
              f"{TARGET_WRITE_RATIO:.0f}x")
    print()
    print(f"apiserver RSS after the run: {rss.get('VmRSS', 0) / 1024:.1f} MiB "
          f"(peak VmHWM {rss.get('VmHWM', 0) / 1024:.1f} MiB)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000, help="pods to create, get and update (default 1000)")
    parser.add_argument("--lists", type=int, default=20, help="LISTs of all pods to time (default 20)")
    parser.add_argument("--amqp", nargs="?", const="start", default=None, metavar="URL",
                        help="run the event publisher: start a private RabbitMQ, or use URL")
    parser.add_argument("--keep", action="store_true", help="keep the working directory (logs, data)")
    args = parser.parse_args(argv)
    if args.count < 1 or args.lists < 1:
        parser.error("--count and --lists must be positive")

    workdir = Path(tempfile.mkdtemp(prefix="minik8s-bench-"))
    etcd = EtcdProcess(workdir / "etcd")
    rabbitmq: RabbitMQProcess | None = None
    server: BenchApiServer | None = None
    try:
        print(f"starting etcd{' and RabbitMQ' if args.amqp == 'start' else ''} and the apiserver in {workdir} ...",
              flush=True)
        etcd.start()
        amqp_url = args.amqp
        if args.amqp == "start":
            rabbitmq = RabbitMQProcess(workdir / "rabbitmq")
            rabbitmq.start()
            amqp_url = rabbitmq.url
        server = BenchApiServer(workdir / "apiserver", etcd.endpoint, amqp_url, make_pki(workdir / "pki"))
        server.start()
        assert server.process is not None
        print(f"apiserver {server.url} (pid {server.process.pid}); timing {args.count} pods ...", flush=True)

        samples, list_bytes = run_api_workload(server, args.count, args.lists)
        rss = rss_kib(server.process.pid)
        etcd_samples, value_size = asyncio.run(run_etcd_puts(etcd, args.count))

        results = {key: summary(values) for key, values in samples.items()}
        results["etcd"] = summary(etcd_samples)
        print_report(results, value_size, list_bytes, args.count, rss, amqp_url is not None)
    finally:
        if server is not None:
            server.stop()
        if rabbitmq is not None:
            rabbitmq.terminate()
        etcd.stop()
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
