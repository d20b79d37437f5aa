"""The metrics.k8s.io API and ``kubectl top`` against a real Prometheus scraping cAdvisor-format metrics.

The test serves a small exposition in the kubelet's ``/metrics/cadvisor`` format: CPU counters that grow
at known rates and fixed working sets, for two pods (with a sandbox and a pod-level cgroup series that must
not count) and the node's root cgroup. Prometheus (Debian's binary, private data dir and port) scrapes it
with the ``node`` label the cluster's file_sd targets carry; an apiserver started with ``--prometheus-url``
answers the metrics API from it, and our kubectl and upstream kubectl print the figures. The apiserver's rate
window is ``--metrics-window 10s`` (Prometheus scrapes every second), so the figures are exact once ten
seconds of scrapes are in, not a minute.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from daemons.api.client import ApiClient
from daemons.api.errors import NotFound, ServiceUnavailable
from daemons.api.resources import by_kind
from daemons.api.usage import PrometheusClient, duration_seconds
from tests.conftest import ApiServerProcess, ExpositionServer, PrometheusProcess, upstream_kubectls

pytestmark = pytest.mark.integration

KUBECTL = Path(sys.executable).with_name("kubectl")
UPSTREAM = upstream_kubectls()
PODS = by_kind("v1", "Pod")
NODES = by_kind("v1", "Node")
NAMESPACES = by_kind("v1", "Namespace")
METRICS = "/apis/metrics.k8s.io/v1beta1"
MI = 2**20
# The apiserver's --metrics-window: ten of Prometheus' one-second scrapes.
WINDOW = "10s"
WINDOW_SECONDS = duration_seconds(WINDOW)


@dataclass(frozen=True)
class Series:
    """One container's figures: CPU in cores (the counter's rate) and its working set in bytes."""

    pod: str
    container: str
    cores: float
    working_set: int


class CadvisorExporter:
    """``GET /metrics/cadvisor`` in cAdvisor's format, with explicit sample timestamps so rates are exact."""

    def __init__(self, namespace: str, series: list[Series], node_cores: float, node_working_set: int) -> None:
        self.namespace = namespace
        self.series = series
        self.node_cores = node_cores
        self.node_working_set = node_working_set
        self.started_ms = int(time.time() * 1000)
        self.server = ExpositionServer(lambda: self.exposition(int(time.time() * 1000)), "/metrics/cadvisor")
        self.address = self.server.address

    def exposition(self, now_ms: int) -> str:
        elapsed = (now_ms - self.started_ms) / 1000
        cpu = ["# HELP container_cpu_usage_seconds_total Cumulative cpu time consumed in seconds.",
               "# TYPE container_cpu_usage_seconds_total counter"]
        memory = ["# HELP container_memory_working_set_bytes Current working set in bytes.",
                  "# TYPE container_memory_working_set_bytes gauge"]
        rows = [('id="/",container="",pod="",namespace="",image="",name=""', self.node_cores,
                 self.node_working_set)]
        for index, entry in enumerate(self.series):
            cgroup = f"/kubepods/pod{entry.pod}/{index}"
            rows.append((f'id="{cgroup}",container="{entry.container}",pod="{entry.pod}",'
                         f'namespace="{self.namespace}",image="busybox",name="k8s_{entry.container}_{entry.pod}"',
                         entry.cores, entry.working_set))
        for labels, cores, working_set in rows:
            cpu.append(f"container_cpu_usage_seconds_total{{{labels},cpu=\"total\"}} {cores * elapsed!r} {now_ms}")
            memory.append(f"container_memory_working_set_bytes{{{labels}}} {working_set} {now_ms}")
        return "\n".join(cpu + memory) + "\n"

@dataclass
class Cluster:
    apiserver: ApiServerProcess
    api: ApiClient
    prometheus: PrometheusProcess
    namespace: str
    node: str


SERIES = [
    Series("web", "app", 0.25, 64 * MI),
    Series("web", "sidecar", 0.01, 10 * MI),
    Series("web", "POD", 0.5, 1 * MI),  # the sandbox: never counted
    Series("web", "", 0.9, 200 * MI),  # the pod's own cgroup: never counted
    Series("db", "pg", 0.1, 100 * MI),
]


def pod(name: str, containers: list[str], labels: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": c, "image": "busybox:latest"} for c in containers]}}


@pytest.fixture(scope="module")
def cluster(apiserver_factory, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    namespace, node = f"top-{uuid.uuid4().hex[:8]}", f"metrics-node-{uuid.uuid4().hex[:8]}"
    exporter = CadvisorExporter(namespace, SERIES, node_cores=1.5, node_working_set=2 * 2**30)
    # labelled with its node, as the cluster's file_sd targets are
    prometheus = PrometheusProcess(tmp_path_factory.mktemp("prometheus"), [{
        "job_name": "kubelet-cadvisor", "metrics_path": "/metrics/cadvisor",
        "static_configs": [{"targets": [exporter.address], "labels": {"node": node}}]}])
    prometheus.start()
    apiserver = apiserver_factory(extra_args=["--prometheus-url", prometheus.url, "--metrics-window", WINDOW])
    api = apiserver.client()
    api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for body in (pod("web", ["app", "sidecar"], {"app": "web"}), pod("db", ["pg"], {"app": "db"}),
                 pod("fresh", ["main"], {"app": "fresh"})):
        api.create(PODS, body, namespace)
    created = api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    created["status"] = {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                         "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
    api.update_status(NODES, created)
    try:
        wait_for_samples(api, prometheus, namespace, node)
        yield Cluster(apiserver, api, prometheus, namespace, node)
    finally:
        for cleanup in (lambda: api.delete(NODES, node), lambda: api.delete(NAMESPACES, namespace)):
            with contextlib.suppress(NotFound):
                cleanup()
        api.close()
        prometheus.stop()
        exporter.server.close()


def wait_for_samples(api: ApiClient, prometheus: PrometheusProcess, namespace: str, node: str) -> None:
    """Until Prometheus holds more than a rate window of scrapes, as a user waits a window before top is exact.

    Before that, ``rate()`` sees only part of its window and reports less, as it does for a new pod.
    """
    deadline = time.monotonic() + 150
    covered = f'count_over_time(container_cpu_usage_seconds_total{{id="/"}}[{WINDOW_SECONDS + 30}s])'
    client = PrometheusClient(prometheus.url)
    try:
        while True:
            samples = client.query(covered)
            pods = api.request("GET", f"{METRICS}/namespaces/{namespace}/pods")["items"]
            nodes = api.request("GET", f"{METRICS}/nodes")["items"]
            full = bool(samples) and samples[0][1] > WINDOW_SECONDS + 3
            if full and {p["metadata"]["name"] for p in pods} == {"web", "db"} and node in {
                    n["metadata"]["name"] for n in nodes}:
                return
            assert time.monotonic() < deadline, f"no full window of metrics yet: {samples} {pods} {nodes}"
            time.sleep(1)
    finally:
        client.close()


def run(binary: Path, cluster: Cluster, *args: str, kubeconfig: Path | None = None,
        namespace: str | None = None) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith("KUBE")}
    env["HOME"] = str(cluster.prometheus.workdir)
    argv = [str(binary), "--kubeconfig", str(kubeconfig or cluster.apiserver.kubeconfig),
            "-n", namespace or cluster.namespace, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, check=False)


def table(result: subprocess.CompletedProcess) -> list[list[str]]:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return [line.split() for line in result.stdout.splitlines()]


KUBECTLS = {"ours": KUBECTL, **{f"kubectl-{version}": path for version, path in UPSTREAM.items()}}


@pytest.fixture(params=sorted(KUBECTLS))
def kubectl(request: pytest.FixtureRequest) -> Path:
    binary = KUBECTLS[request.param]
    assert os.access(binary, os.X_OK), f"{binary} is missing"
    return binary


def test_discovery_lists_the_metrics_group(cluster: Cluster):
    groups = {g["name"]: g for g in cluster.api.request("GET", "/apis")["groups"]}
    assert groups["metrics.k8s.io"]["preferredVersion"]["groupVersion"] == "metrics.k8s.io/v1beta1"
    resources = {r["name"]: r for r in cluster.api.request("GET", METRICS)["resources"]}
    assert resources["pods"]["kind"] == "PodMetrics" and resources["pods"]["namespaced"]
    assert resources["nodes"]["kind"] == "NodeMetrics" and not resources["nodes"]["namespaced"]


def test_pod_metrics_as_metrics_server_shapes_them(cluster: Cluster):
    web = cluster.api.request("GET", f"{METRICS}/namespaces/{cluster.namespace}/pods/web")
    assert web["kind"] == "PodMetrics" and web["window"] == "10s"
    assert web["metadata"]["labels"] == {"app": "web"} and web["metadata"]["namespace"] == cluster.namespace
    assert web["containers"] == [{"name": "app", "usage": {"cpu": "250m", "memory": "64Mi"}},
                                 {"name": "sidecar", "usage": {"cpu": "10m", "memory": "10Mi"}}]
    selected = cluster.api.request("GET", f"{METRICS}/pods", params={"labelSelector": "app=db"})["items"]
    assert [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in selected] == [(cluster.namespace, "db")]


def test_a_pod_without_samples_is_not_found(cluster: Cluster):
    listed = cluster.api.request("GET", f"{METRICS}/namespaces/{cluster.namespace}/pods")["items"]
    assert "fresh" not in {p["metadata"]["name"] for p in listed}
    with pytest.raises(NotFound, match=f'podmetrics.metrics.k8s.io "{cluster.namespace}/fresh" not found'):
        cluster.api.request("GET", f"{METRICS}/namespaces/{cluster.namespace}/pods/fresh")


def test_node_metrics_from_the_root_cgroup(cluster: Cluster):
    node = cluster.api.request("GET", f"{METRICS}/nodes/{cluster.node}")
    assert node["kind"] == "NodeMetrics" and node["usage"] == {"cpu": "1500m", "memory": "2Gi"}


def test_top_pods(kubectl: Path, cluster: Cluster):
    assert table(run(kubectl, cluster, "top", "pods")) == [
        ["NAME", "CPU(cores)", "MEMORY(bytes)"], ["db", "100m", "100Mi"], ["web", "260m", "74Mi"]]
    assert table(run(kubectl, cluster, "top", "pods", "-l", "app=web", "--no-headers")) == [["web", "260m", "74Mi"]]


def test_top_pod_containers(kubectl: Path, cluster: Cluster):
    assert table(run(kubectl, cluster, "top", "pod", "web", "--containers")) == [
        ["POD", "NAME", "CPU(cores)", "MEMORY(bytes)"], ["web", "app", "250m", "64Mi"],
        ["web", "sidecar", "10m", "10Mi"]]


def test_top_pods_in_every_namespace_sorted_by_cpu(kubectl: Path, cluster: Cluster):
    rows = table(run(kubectl, cluster, "top", "pods", "-A", "--sort-by", "cpu"))
    assert rows[0] == ["NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)"]
    assert [row for row in rows[1:] if row[0] == cluster.namespace] == [
        [cluster.namespace, "web", "260m", "74Mi"], [cluster.namespace, "db", "100m", "100Mi"]]


def test_top_nodes_against_allocatable(kubectl: Path, cluster: Cluster):
    rows = table(run(kubectl, cluster, "top", "nodes"))
    assert rows[0] == ["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"] or (
        kubectl.name == "kubectl.1.27" and rows[0] == ["NAME", "CPU(cores)", "CPU%", "MEMORY(bytes)", "MEMORY%"])
    assert [cluster.node, "1500m", "37%", "2048Mi", "25%"] in rows
    assert table(run(kubectl, cluster, "top", "node", cluster.node, "--no-headers")) == [
        [cluster.node, "1500m", "37%", "2048Mi", "25%"]]


def test_top_pods_where_there_is_nothing_to_show(kubectl: Path, cluster: Cluster, namespace: str):
    empty = run(kubectl, cluster, "top", "pods", namespace=namespace)
    assert empty.returncode == 0 and empty.stdout == ""
    assert f"No resources found in {namespace} namespace." in empty.stderr
    cluster.api.create(PODS, pod("fresh", ["main"], {"app": "fresh"}), namespace)
    young = run(kubectl, cluster, "top", "pods", namespace=namespace)
    assert young.returncode == 1 and "error: metrics not available yet" in young.stderr
    named = run(kubectl, cluster, "top", "pod", "fresh", namespace=namespace)
    assert named.returncode == 1
    assert f'Error from server (NotFound): podmetrics.metrics.k8s.io "{namespace}/fresh" not found' in named.stderr


def test_top_without_the_metrics_api(kubectl: Path, cluster: Cluster, apiserver):
    result = run(kubectl, cluster, "top", "pods", kubeconfig=apiserver.kubeconfig)
    assert result.returncode == 1 and "error: Metrics API not available" in result.stderr


def test_prometheus_down_is_service_unavailable(cluster: Cluster):
    cluster.prometheus.stop()
    try:
        with pytest.raises(ServiceUnavailable, match="Prometheus"):
            cluster.api.request("GET", f"{METRICS}/namespaces/{cluster.namespace}/pods")
        result = run(KUBECTL, cluster, "top", "nodes")
        assert result.returncode == 1 and "Prometheus" in result.stderr
    finally:
        cluster.prometheus.start()
