"""The autoscaler end to end below the kubelet: a real controller manager, apiserver, etcd, RabbitMQ and Prometheus.

Prometheus scrapes an exposition endpoint served here whose CPU counter for the
target's pod grows at a chosen rate, as a kubelet's cAdvisor metrics would. No
Deployment controller or kubelet runs: the test creates the Deployment's pod and
reports it Running and Ready itself, and watches what the autoscaler writes to
the Deployment's scale, the HPA's status, the events, and ``get hpa``.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemons.api.client import ApiClient
from daemons.api.resources import require
from tests.conftest import (
    ApiServerProcess,
    ControllerManagerProcess,
    ExpositionServer,
    PrometheusProcess,
    RabbitMQProcess,
    events,
    serving,
    upstream_kubectls,
    wait_for,
)

pytestmark = pytest.mark.integration

PODS = require("v1", "Pod")
DEPLOYMENTS = require("apps/v1", "Deployment")
HPAS = require("autoscaling/v2", "HorizontalPodAutoscaler")
KUBECTL = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "kubectl"
LONG_AGO = "2020-01-01T00:00:00Z"
ROW = re.compile(r"web\s+Deployment/web\s+cpu: (\d+)%/50%\s+1\s+4\s+[12]\s+\S+$")
CORES_PER_SECOND = 0.2  # 200% of the pod's 100m request, against a 50% target


class CadvisorEndpoint:
    """Serves ``container_cpu_usage_seconds_total`` growing at a fixed rate, and a working set, for given pods."""

    def __init__(self) -> None:
        self.pods: list[tuple[str, str]] = []
        self.started = time.monotonic()
        self.server = ExpositionServer(self.exposition)

    def exposition(self) -> str:
        seconds = (time.monotonic() - self.started) * CORES_PER_SECOND
        lines = ["# TYPE container_cpu_usage_seconds_total counter",
                 "# TYPE container_memory_working_set_bytes gauge"]
        for namespace, pod in self.pods:
            labels = f'container="app",namespace="{namespace}",pod="{pod}"'
            lines.append(f"container_cpu_usage_seconds_total{{{labels}}} {seconds:.6f}")
            lines.append(f"container_memory_working_set_bytes{{{labels}}} {10 * 2**20}")
        return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def cadvisor() -> Iterator[CadvisorEndpoint]:
    endpoint = CadvisorEndpoint()
    try:
        yield endpoint
    finally:
        endpoint.server.close()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory, cadvisor: CadvisorEndpoint) -> Iterator[PrometheusProcess]:
    process = PrometheusProcess(tmp_path_factory.mktemp("prometheus"), [
        {"job_name": "cadvisor", "static_configs": [{"targets": [cadvisor.server.address]}]}])
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory, apiserver: ApiServerProcess, rabbitmq: RabbitMQProcess,
            prometheus: PrometheusProcess) -> Iterator[ControllerManagerProcess]:
    process = ControllerManagerProcess(tmp_path_factory.mktemp("controller-manager"), apiserver,
                                       "--controllers", "horizontalpodautoscaling",
                                       "--prometheus-url", prometheus.url,
                                       "--horizontal-pod-autoscaler-sync-period", "1")
    with serving(process, rabbitmq):
        yield process


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
    wait_for(lambda: api.get(DEPLOYMENTS, "web", namespace)["spec"]["replicas"], 2, manager, timeout=90)
    hpa = wait_for(lambda: api.get(HPAS, "web", namespace), lambda obj: (obj.get("status") or {}).get("lastScaleTime")
                   and conditions(obj).get("ScalingLimited", ("", ""))[0] == "True", manager, timeout=90)
    status = hpa["status"]
    assert status["desiredReplicas"] == 2
    assert conditions(hpa)["ScalingLimited"] == ("True", "ScaleUpLimit")
    assert conditions(hpa)["ScalingActive"] == ("True", "ValidMetricFound")
    utilization = status["currentMetrics"][0]["resource"]["current"]["averageUtilization"]
    # rate() over Prometheus' one-minute window reads low while the series is younger than the window
    assert utilization > 50, status

    assert ("SuccessfulRescale", "New size: 2; reason: cpu resource utilization (percentage of request) above "
            "target") in {(event["reason"], event["message"]) for event in events(api, namespace, "web")}
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
    wait_for(lambda: api.get(DEPLOYMENTS, "api", namespace)["spec"]["replicas"], 2, manager, timeout=90)
    again = subprocess.run([*kubectl, "autoscale", "deployment/api", "--max", "3"], capture_output=True, text=True,
                           timeout=60, check=False)
    assert again.returncode == 1 and "already exists" in again.stderr, again.stderr
