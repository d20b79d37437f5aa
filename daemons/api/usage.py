"""Resource usage of pods and nodes, read from Prometheus scraping the kubelets' cAdvisor metrics.

The apiserver's metrics.k8s.io API and the horizontal pod autoscaler both need "how much CPU and memory
does this container use now"; they ask Prometheus the same queries through this module, so both report
the same figures. CPU is a rate over a window (one minute unless the apiserver is told otherwise); memory is
the working set, as metrics-server reports.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import httpx

from daemons.api.errors import ConnectionFailed, MiniK8sError

# A Prometheus duration: units from years down to milliseconds, largest first, each at most once.
DURATION = re.compile(r"(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?")
DURATION_UNITS = (365 * 86400, 7 * 86400, 86400, 3600, 60, 1, 0.001)


def duration_seconds(text: str) -> float:
    """The length of a Prometheus duration (``1m``, ``30s``, ``1m30s``), so a bad window fails at startup
    rather than in every query; a window must be longer than nothing."""
    match = DURATION.fullmatch(text)
    if not text or match is None:
        raise ValueError(f"{text!r} is not a Prometheus duration (e.g. 1m, 30s, 1m30s)")
    seconds = sum(int(count) * unit for count, unit in zip(match.groups(), DURATION_UNITS, strict=True) if count)
    if seconds <= 0:
        raise ValueError(f"{text!r} is no time at all: a rate needs a window")
    return seconds


WINDOW = "1m"
WINDOW_SECONDS = duration_seconds(WINDOW)
SANDBOX_CONTAINER = "POD"

Sample = tuple[dict[str, str], float]


class PrometheusError(MiniK8sError):
    """Prometheus answered a query with an error, or with something that is not an instant vector."""


@dataclass(frozen=True)
class Usage:
    cpu: float  # cores
    memory: float  # bytes (working set)


def _quote(value: str) -> str:
    """A PromQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def pod_queries(namespace: str | None = None, window: str = WINDOW) -> tuple[str, str]:
    """The CPU (a rate over ``window``) and memory queries for every application container (sandbox and cgroup
    totals left out)."""
    matchers = f'container!="",container!={_quote(SANDBOX_CONTAINER)},pod!=""'
    if namespace:
        matchers += f",namespace={_quote(namespace)}"
    by = "sum by (namespace, pod, container)"
    return (f"{by} (rate(container_cpu_usage_seconds_total{{{matchers}}}[{window}]))",
            f"{by} (container_memory_working_set_bytes{{{matchers}}})")


def node_queries(window: str = WINDOW) -> tuple[str, str]:
    """The CPU (a rate over ``window``) and memory queries for whole nodes: the root cgroup's series, labelled
    by node."""
    return (f'sum by (node) (rate(container_cpu_usage_seconds_total{{id="/"}}[{window}]))',
            'sum by (node) (container_memory_working_set_bytes{id="/"})')


def parse_vector(body: Any, promql: str) -> list[Sample]:
    """The samples of an instant-vector answer of ``/api/v1/query``; NaN and infinite values are dropped."""
    if not isinstance(body, dict):
        raise PrometheusError(f"Prometheus answered query {promql!r} with something that is not JSON")
    if body.get("status") != "success":
        raise PrometheusError(f"Prometheus rejected query {promql!r}: "
                              f"{body.get('errorType') or 'error'}: {body.get('error') or 'no reason given'}")
    data = body.get("data") or {}
    if data.get("resultType") != "vector":
        raise PrometheusError(f"Prometheus answered query {promql!r} with a {data.get('resultType')!r}, "
                              "not an instant vector")
    samples: list[Sample] = []
    for entry in data.get("result") or []:
        try:
            value = float(entry["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            raise PrometheusError(f"Prometheus answered query {promql!r} with a malformed sample: {entry!r}") from None
        if math.isfinite(value):
            samples.append(({str(k): str(v) for k, v in (entry.get("metric") or {}).items()}, value))
    return samples


def combine_pods(cpu: list[Sample], memory: list[Sample]) -> dict[tuple[str, str], dict[str, Usage]]:
    """(namespace, pod) → container → usage, for containers with both a CPU rate and a memory sample.

    A container only scraped once has no rate yet; leaving it out makes its pod "no metrics yet" rather
    than "uses no CPU", which would mislead the autoscaler.
    """
    memory_by_key = {(m.get("namespace", ""), m.get("pod", ""), m.get("container", "")): v for m, v in memory}
    pods: dict[tuple[str, str], dict[str, Usage]] = {}
    for labels, cores in cpu:
        key = (labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", ""))
        if not all(key) or key[2] == SANDBOX_CONTAINER or key not in memory_by_key:
            continue
        pods.setdefault(key[:2], {})[key[2]] = Usage(cpu=cores, memory=memory_by_key[key])
    return pods


def combine_nodes(cpu: list[Sample], memory: list[Sample]) -> dict[str, Usage]:
    """node name → usage, for nodes with both a CPU rate and a memory sample."""
    memory_by_node = {labels.get("node", ""): value for labels, value in memory}
    return {labels["node"]: Usage(cpu=cores, memory=memory_by_node[labels["node"]])
            for labels, cores in cpu if labels.get("node") and labels["node"] in memory_by_node}


class PrometheusClient:
    """A blocking client for Prometheus' instant-query API."""

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def query(self, promql: str) -> list[Sample]:
        """The instant vector ``promql`` evaluates to now."""
        try:
            response = self._http.get("/api/v1/query", params={"query": promql})
        except httpx.TransportError as error:
            raise ConnectionFailed(f"cannot reach Prometheus at {self.url}: {error}") from None
        try:
            body = response.json()
        except ValueError:
            raise PrometheusError(f"Prometheus at {self.url} answered query {promql!r} with HTTP "
                                  f"{response.status_code}: {response.text[:200]}") from None
        return parse_vector(body, promql)


def pod_usage(prometheus: PrometheusClient, namespace: str | None = None,
              window: str = WINDOW) -> dict[tuple[str, str], dict[str, Usage]]:
    """Per-container usage of every pod with samples, in one namespace or all."""
    cpu_query, memory_query = pod_queries(namespace, window)
    return combine_pods(prometheus.query(cpu_query), prometheus.query(memory_query))


def node_usage(prometheus: PrometheusClient, window: str = WINDOW) -> dict[str, Usage]:
    """Usage of every node with samples."""
    cpu_query, memory_query = node_queries(window)
    return combine_nodes(prometheus.query(cpu_query), prometheus.query(memory_query))
