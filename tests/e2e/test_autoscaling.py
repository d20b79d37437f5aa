"""The autoscaling example on the installed cluster: load grows the Deployment at the policy's rate, then it shrinks."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import httpx

from daemons.api.resources import resolve
from tests.conftest import upstream_kubectls
from tests.e2e.conftest import OUR_KUBECTL, run_kubectl, wait_for

PODS = resolve("pods")
SERVICES = resolve("services")
DEPLOYMENTS = resolve("deployments")
AUTOSCALERS = resolve("horizontalpodautoscalers")
EXAMPLE = Path(__file__).parents[2] / "examples" / "autoscaling.yaml"
MAX_REPLICAS = 4
SCALE_UP_PERIOD_SECONDS = 15  # the example's scaleUp policy: one pod per 15 s


def replicas(cluster, namespace: str) -> int:
    return cluster.get(DEPLOYMENTS, "web", namespace)["spec"]["replicas"]


def test_the_example_scales_up_at_the_policy_rate_serves_from_every_pod_and_scales_back_down(cluster,
                                                                                             e2e_namespace):
    run_kubectl("-n", e2e_namespace, "apply", "-f", str(EXAMPLE))

    # Follow the Deployment's size as the autoscaler changes it, noting when each change was seen.
    changes: list[tuple[float, int]] = [(time.monotonic(), replicas(cluster, e2e_namespace))]
    deadline = time.monotonic() + 300
    while changes[-1][1] < MAX_REPLICAS:
        assert time.monotonic() < deadline, f"not at {MAX_REPLICAS} replicas after 300 s: {changes}"
        size = replicas(cluster, e2e_namespace)
        if size != changes[-1][1]:
            changes.append((time.monotonic(), size))
        time.sleep(0.5)
    sizes = [size for _, size in changes]
    assert sizes == list(range(1, MAX_REPLICAS + 1)), f"one pod at a time: {sizes}"
    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(changes[1:])]
    # Polled twice a second: a change can be seen up to half a second late, so a gap may look that much shorter.
    assert all(gap >= SCALE_UP_PERIOD_SECONDS - 1 for gap in gaps), f"faster than 1 pod per 15 s: {gaps}"

    hpa = cluster.get(AUTOSCALERS, "web", e2e_namespace)
    status = hpa["status"]
    assert status["desiredReplicas"] == MAX_REPLICAS
    cpu = status["currentMetrics"][0]["resource"]
    assert cpu["name"] == "cpu" and cpu["current"]["averageUtilization"] > 50, status["currentMetrics"]
    row = run_kubectl("-n", e2e_namespace, "get", "hpa", "web").stdout.splitlines()
    assert row[0].split() == ["NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"], row
    assert "Deployment/web" in row[1] and "cpu:" in row[1] and "%/50%" in row[1], row
    for version, binary in upstream_kubectls().items():
        upstream = run_kubectl("-n", e2e_namespace, "get", "hpa", "web", binary=binary).stdout.splitlines()
        assert "Deployment/web" in upstream[1] and "/50%" in upstream[1], (version, upstream)

    # The new pods serve through the Service.
    cluster_ip = cluster.get(SERVICES, "web", e2e_namespace)["spec"]["clusterIP"]
    wait_for(lambda: len({httpx.get(f"http://{cluster_ip}/", timeout=3).text for _ in range(40)}) == MAX_REPLICAS,
             120, what=f"all {MAX_REPLICAS} pods to answer through the Service")
    top = run_kubectl("-n", e2e_namespace, "top", "pods").stdout
    assert top.splitlines()[0].split() == ["NAME", "CPU(cores)", "MEMORY(bytes)"], top
    assert sum(line.startswith("web-") for line in top.splitlines()) >= 1, top
    events = run_kubectl("-n", e2e_namespace, "describe", "hpa", "web").stdout
    assert "SuccessfulRescale" in events, events

    # Without load, usage falls over the 1-minute rate window. The example's 60-second scale-down window is
    # closed first (through upstream kubectl where there is one), so the shrink follows the usage at once.
    binary = str(next(iter(upstream_kubectls().values()), OUR_KUBECTL))
    run_kubectl("-n", e2e_namespace, "patch", "hpa", "web", "--type", "merge", "-p",
                '{"spec":{"behavior":{"scaleDown":{"stabilizationWindowSeconds":0}}}}', binary=binary)
    assert cluster.get(AUTOSCALERS, "web", e2e_namespace)["spec"]["behavior"]["scaleDown"][
        "stabilizationWindowSeconds"] == 0
    run_kubectl("-n", e2e_namespace, "delete", "pod", "load", "--grace-period", "0")
    wait_for(lambda: replicas(cluster, e2e_namespace) == 1, 300, interval=2, what="the Deployment back at 1 replica")
    wait_for(lambda: len([pod for pod in cluster.list(PODS, e2e_namespace, label_selector="app=web")["items"]
                          if not pod["metadata"].get("deletionTimestamp")]) == 1, 60, what="one web pod left")
