"""The autoscaler end to end below the kubelet: a real controller manager, apiserver, etcd, RabbitMQ and Prometheus.

Prometheus scrapes an exposition endpoint served here whose CPU counter for the
target's pod grows at a chosen rate, as a kubelet's cAdvisor metrics would. No
Deployment controller or kubelet runs: the test creates the Deployment's pod and
reports it Running and Ready itself, and watches what the autoscaler writes to
the Deployment's scale, the HPA's status, the events, and ``get hpa``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from daemons.api.client import ApiClient
from daemons.api.resources import require
from tests.conftest import (
    ApiDaemonProcess,
    ApiServerProcess,
    RabbitMQProcess,
    ServiceProcess,
    delete_queues,
    free_port,
    upstream_kubectls,
)

pytestmark = pytest.mark.integration

PODS = require("v1", "Pod")
DEPLOYMENTS = require("apps/v1", "Deployment")
HPAS = require("autoscaling/v2", "HorizontalPodAutoscaler")
EVENTS = require("v1", "Event")
QUEUES = ("controller-manager.pods", "controller-manager.horizontalpodautoscalers.autoscaling")
KUBECTL = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "kubectl"
LONG_AGO = "2020-01-01T00:00:00Z"
ROW = re.compile(r"web\s+Deployment/web\s+cpu: (\d+)%/50%\s+1\s+4\s+[12]\s+\S+$")
CORES_PER_SECOND = 0.2  # 200% of the pod's 100m request, against a 50% target


class CadvisorEndpoint:
    """Serves ``container_cpu_usage_seconds_total`` growing at a fixed rate, and a working set, for given pods."""

    def __init__(self) -> None:
        self.pods: list[tuple[str, str]] = []
        self.started = time.monotonic()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = endpoint.exposition().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.target = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def exposition(self) -> str:
        seconds = (time.monotonic() - self.started) * CORES_PER_SECOND
        lines = ["# TYPE container_cpu_usage_seconds_total counter",
                 "# TYPE container_memory_working_set_bytes gauge"]
        for namespace, pod in self.pods:
            labels = f'container="app",namespace="{namespace}",pod="{pod}"'
            lines.append(f"container_cpu_usage_seconds_total{{{labels}}} {seconds:.6f}")
            lines.append(f"container_memory_working_set_bytes{{{labels}}} {10 * 2**20}")
        return "\n".join(lines) + "\n"


class PrometheusProcess(ServiceProcess):
    """Debian's Prometheus scraping one target every second."""

    name = "prometheus"

    def __init__(self, workdir: Path, target: str) -> None:
        super().__init__(workdir)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = workdir / "prometheus.yml"
        self.config.write_text("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                               "scrape_configs:\n"
                               "- job_name: cadvisor\n"
                               f"  static_configs: [{{targets: ['{target}']}}]\n")

    def command(self) -> list[str]:
        binary = shutil.which("prometheus")
        assert binary, "the prometheus binary is missing: apt-get install prometheus"
        return [binary, f"--config.file={self.config}", f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}"]

    def is_ready(self) -> bool:
        return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200


class ControllerManagerProcess(ApiDaemonProcess):
    name = "controller-manager"
    program = "minik8s-controller-manager"


@pytest.fixture(scope="module")
def cadvisor() -> Iterator[CadvisorEndpoint]:
    endpoint = CadvisorEndpoint()
    endpoint.thread.start()
    try:
        yield endpoint
    finally:
        endpoint.server.shutdown()
        endpoint.server.server_close()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory, cadvisor: CadvisorEndpoint) -> Iterator[PrometheusProcess]:
    process = PrometheusProcess(tmp_path_factory.mktemp("prometheus"), cadvisor.target)
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory, apiserver: ApiServerProcess, rabbitmq: RabbitMQProcess,
            prometheus: PrometheusProcess) -> Iterator[ControllerManagerProcess]:
    process = ControllerManagerProcess(tmp_path_factory.mktemp("controller-manager"), apiserver,
                                       "--amqp-url", rabbitmq.url, "--controllers", "horizontalpodautoscaling",
                                       "--prometheus-url", prometheus.url,
                                       "--horizontal-pod-autoscaler-sync-period", "1")
    process.start()
    try:
        yield process
    finally:
        process.stop()
        delete_queues(rabbitmq.url, QUEUES)


def deployment(name: str) -> dict:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {"containers": [
                         {"name": "app", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}]}}}}


def start_pod(api: ApiClient, namespace: str, name: str, labels: dict[str, str]) -> None:
    """A pod of the Deployment, Running and Ready for long (so its CPU counts at once), as a kubelet reports it."""
    api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
                      "spec": {"nodeName": "hpa-test-node", "containers": [
                          {"name": "app", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}]}},
               namespace)
    api.patch(PODS, name, {"status": {"phase": "Running", "startTime": LONG_AGO, "podIP": "10.244.9.9",
                                      "conditions": [{"type": "Ready", "status": "True",
                                                      "lastTransitionTime": LONG_AGO}]}},
              namespace, subresource="status")


def wait_for(read: Callable[[], Any], check: Callable[[Any], bool], manager: ControllerManagerProcess,
             timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    value = read()
    while not check(value) and time.monotonic() < deadline:
        time.sleep(0.5)
        value = read()
    assert check(value), f"still {value!r}\n{manager.logs()}"
    return value


def conditions(hpa: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in (hpa.get("status") or {}).get("conditions") or []}


def test_cpu_above_target_scales_the_deployment_up_by_its_policy(api: ApiClient, namespace: str,
                                                                  apiserver: ApiServerProcess,
                                                                  cadvisor: CadvisorEndpoint,
                                                                  manager: ControllerManagerProcess) -> None:
    api.create(DEPLOYMENTS, deployment("web"), namespace)
    start_pod(api, namespace, "web-0", {"app": "web"})
    cadvisor.pods.append((namespace, "web-0"))
    api.create(HPAS, {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web"},
                      "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                               "minReplicas": 1, "maxReplicas": 4,
                               "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                                   "type": "Utilization", "averageUtilization": 50}}}],
                               "behavior": {"scaleUp": {"policies": [
                                   {"type": "Pods", "value": 1, "periodSeconds": 600}]}}}}, namespace)

    # 200% against 50% asks for 4 replicas; the policy allows one more pod per 10 minutes
    wait_for(lambda: api.get(DEPLOYMENTS, "web", namespace)["spec"]["replicas"], lambda replicas: replicas == 2,
             manager)
    hpa = wait_for(lambda: api.get(HPAS, "web", namespace), lambda obj: (obj.get("status") or {}).get("lastScaleTime")
                   and conditions(obj).get("ScalingLimited", ("", ""))[0] == "True", manager)
    status = hpa["status"]
    assert status["desiredReplicas"] == 2
    assert conditions(hpa)["ScalingLimited"] == ("True", "ScaleUpLimit")
    assert conditions(hpa)["ScalingActive"] == ("True", "ValidMetricFound")
    utilization = status["currentMetrics"][0]["resource"]["current"]["averageUtilization"]
    # rate() over Prometheus' one-minute window reads low while the series is younger than the window
    assert utilization > 50, status

    events = [event for event in api.list(EVENTS, namespace)["items"] if event["involvedObject"]["name"] == "web"]
    assert ("SuccessfulRescale", "New size: 2; reason: cpu resource utilization (percentage of request) above "
            "target") in {(event["reason"], event["message"]) for event in events}
    time.sleep(3)  # several more syncs: the policy still holds the Deployment at 2
    assert api.get(DEPLOYMENTS, "web", namespace)["spec"]["replicas"] == 2

    ours = subprocess.run([str(KUBECTL), "--kubeconfig", str(apiserver.kubeconfig), "-n", namespace, "get", "hpa",
                           "web"], capture_output=True, text=True, timeout=60, check=False)
    assert ours.returncode == 0, ours.stderr
    header, row = ours.stdout.splitlines()
    assert header.split() == ["NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"]
    match = ROW.match(row)
    assert match and int(match.group(1)) > 50, row

    for version, binary in upstream_kubectls().items():
        theirs = subprocess.run([str(binary), "--kubeconfig", str(apiserver.kubeconfig), "-n", namespace, "get",
                                 "hpa", "web"], capture_output=True, text=True, timeout=60, check=False)
        assert theirs.returncode == 0, f"kubectl {version}: {theirs.stderr}"
        upstream_row = theirs.stdout.splitlines()[1]
        assert ROW.match(upstream_row), f"kubectl {version}: {theirs.stdout}"


def test_kubectl_autoscale_creates_an_hpa_whose_minimum_holds_without_metrics(
        api: ApiClient, namespace: str, apiserver: ApiServerProcess, manager: ControllerManagerProcess) -> None:
    api.create(DEPLOYMENTS, deployment("api"), namespace)
    kubectl = [str(KUBECTL), "--kubeconfig", str(apiserver.kubeconfig), "-n", namespace]
    created = subprocess.run([*kubectl, "autoscale", "deployment/api", "--min", "2", "--max", "5", "--cpu-percent",
                              "60"], capture_output=True, text=True, timeout=60, check=False)
    assert (created.returncode, created.stdout) == (0, "horizontalpodautoscaler.autoscaling/api autoscaled\n"), \
        created.stderr
    row = subprocess.run([*kubectl, "get", "hpa", "api"], capture_output=True, text=True, timeout=60,
                         check=False).stdout.splitlines()[1]
    assert re.match(r"api\s+Deployment/api\s+cpu: <unknown>/60%\s+2\s+5\s+\d+\s+\S+$", row), row
    # no pod reports usage, yet 1 replica is below the minimum: the autoscaler raises it without metrics
    wait_for(lambda: api.get(DEPLOYMENTS, "api", namespace)["spec"]["replicas"], lambda replicas: replicas == 2,
             manager)
    again = subprocess.run([*kubectl, "autoscale", "deployment/api", "--max", "3"], capture_output=True, text=True,
                           timeout=60, check=False)
    assert again.returncode == 1 and "already exists" in again.stderr, again.stderr
