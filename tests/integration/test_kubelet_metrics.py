"""The kubelet's container metrics, read the way Prometheus reads them.

A real kubelet (against the real apiserver and the machine's Docker) runs a pod
that burns CPU; its ``/metrics/cadvisor`` must show that pod's counters growing
under cAdvisor's names and labels. Then the controller manager's prometheus-sd
controller writes the file_sd targets, and a real Prometheus (Debian's, as
roles/prometheus installs it) scrapes the kubelet through them and answers a
query for the pod with the node's label.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker as docker_sdk
import pytest
from prometheus_client.parser import text_string_to_metric_families

from daemons.api.client import ApiClient
from daemons.api.errors import NotFound
from tests.conftest import ApiServerProcess, ControllerManagerProcess, KubeletProcess, PrometheusProcess, serving
from tests.integration.test_kubelet import (
    PODS,
    busybox,
    make_pod,
    pod_containers,
    running_pod,
    wait_for,
)

pytestmark = pytest.mark.integration

BURNER = busybox("burner", "while :; do :; done", resources={"limits": {"cpu": "200m"}})


@pytest.fixture
def burner(kubelet: KubeletProcess, api: ApiClient, namespace: str) -> Iterator[str]:
    """A running pod ``burner`` on the kubelet's node whose one container spins."""
    api.create(PODS, make_pod("burner", kubelet.node_name, [BURNER]), namespace)
    running_pod(api, namespace, "burner")
    try:
        yield "burner"
    finally:
        with contextlib.suppress(NotFound):
            api.delete(PODS, "burner", namespace)


def scrape(kubelet: KubeletProcess) -> dict[str, list[Any]]:
    """Family name -> samples of one /metrics/cadvisor answer."""
    response = kubelet.api("GET", "/metrics/cadvisor")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {family.name: family.samples for family in text_string_to_metric_families(response.text)}


def series(families: dict[str, list[Any]], family: str, **labels: str) -> list[Any]:
    return [sample for sample in families.get(family, [])
            if all(sample.labels.get(name) == value for name, value in labels.items())]


def burner_cpu(kubelet: KubeletProcess, namespace: str) -> float:
    found = series(scrape(kubelet), "container_cpu_usage_seconds", namespace=namespace, pod="burner",
                   container="burner")
    assert len(found) == 1, found
    return float(found[0].value)


def test_cadvisor_metrics_of_a_busy_pod(kubelet: KubeletProcess, namespace: str, burner: str,
                                        docker: docker_sdk.DockerClient) -> None:
    ids = pod_containers(docker, kubelet.node_name, namespace, burner)
    families = scrape(kubelet)
    pod = {"namespace": namespace, "pod": burner}

    [cpu] = series(families, "container_cpu_usage_seconds", container="burner", **pod)
    assert cpu.name == "container_cpu_usage_seconds_total"
    assert ids["burner"] in cpu.labels["id"]
    assert cpu.labels["image"] == "busybox:latest"
    assert cpu.labels["name"] == docker.containers.get(ids["burner"]).name
    first = burner_cpu(kubelet, namespace)
    wait_for(lambda: burner_cpu(kubelet, namespace) > first, 30, "the burner's CPU counter to grow")

    [working_set] = series(families, "container_memory_working_set_bytes", container="burner", **pod)
    [usage] = series(families, "container_memory_usage_bytes", container="burner", **pod)
    assert 0 < working_set.value <= usage.value

    # The sandbox carries the pod's network; the app containers share it and have no network series.
    [pause_cpu] = series(families, "container_cpu_usage_seconds", container="POD", **pod)
    assert ids["POD"] in pause_cpu.labels["id"]
    received = series(families, "container_network_receive_bytes", container="POD", interface="eth0", **pod)
    assert len(received) == 1 and received[0].name == "container_network_receive_bytes_total"
    assert series(families, "container_network_transmit_packets", container="POD", interface="eth0", **pod)
    assert not series(families, "container_network_receive_bytes", container="burner", **pod)

    # The node's totals: the root cgroup, no pod.
    [node_cpu] = series(families, "container_cpu_usage_seconds", id="/")
    assert node_cpu.labels["pod"] == node_cpu.labels["namespace"] == node_cpu.labels["container"] == ""
    assert node_cpu.value >= cpu.value
    [node_memory] = series(families, "container_memory_working_set_bytes", id="/")
    assert node_memory.value > working_set.value


def test_metrics_need_the_token(kubelet: KubeletProcess) -> None:
    assert kubelet.api("GET", "/metrics/cadvisor", token="").status_code == 401
    assert kubelet.api("GET", "/metrics", token="wrong").status_code == 401
    own = kubelet.api("GET", "/metrics")
    assert own.status_code == 200
    assert "process_cpu_seconds_total" in {sample.name for family in text_string_to_metric_families(own.text)
                                           for sample in family.samples}


def test_prometheus_scrapes_the_kubelet_through_the_sd_targets(
        kubelet: KubeletProcess, apiserver: ApiServerProcess, namespace: str, burner: str,
        tmp_path: Path) -> None:
    sd_dir = tmp_path / "sd"
    manager = ControllerManagerProcess(tmp_path / "controller-manager", apiserver, "--controllers", "prometheus-sd",
                                       "--prometheus-sd-dir", str(sd_dir))
    token_file = tmp_path / "kubelet-token"
    token_file.write_text(kubelet.token)
    # with the kubelet's token, trusting its self-signed certificate
    prometheus = PrometheusProcess(tmp_path / "prometheus", [{
        "job_name": "cadvisor", "scheme": "https", "metrics_path": "/metrics/cadvisor",
        "authorization": {"credentials_file": str(token_file)},
        "tls_config": {"ca_file": str(kubelet.root_dir / "pki" / "kubelet.crt")},
        "file_sd_configs": [{"files": [str(sd_dir / "kubelets.json")], "refresh_interval": "1s"}]}])
    with serving(manager):
        target = {"targets": [f"127.0.0.1:{kubelet.port}"], "labels": {"node": kubelet.node_name}}

        def listed() -> bool:
            with contextlib.suppress(FileNotFoundError, ValueError):
                return target in json.loads((sd_dir / "kubelets.json").read_text())
            return False

        wait_for(listed, 30, f"{kubelet.node_name} in kubelets.json")
        prometheus.start()
        try:
            query = f'container_cpu_usage_seconds_total{{namespace="{namespace}",pod="{burner}",container="burner"}}'
            [result] = wait_for(lambda: prometheus.query(query), 60, f"Prometheus to answer {query}")
            assert result["metric"]["node"] == kubelet.node_name
            assert result["metric"]["job"] == "cadvisor"
            assert float(result["value"][1]) > 0
        finally:
            prometheus.stop()
