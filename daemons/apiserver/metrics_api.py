"""The metrics.k8s.io/v1beta1 API (``kubectl top``, the autoscaler's clients): usage from Prometheus.

Upstream a separate metrics-server answers this group; here the apiserver answers it itself, asking
Prometheus (which scrapes every kubelet's cAdvisor metrics) through ``daemons.api.usage``. The objects
are shaped as metrics-server returns them; pods and nodes come from the apiserver's own objects, so
selectors and labels behave as for ``pods`` and ``nodes``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from daemons.api import errors
from daemons.api.resources import require
from daemons.api.usage import (
    WINDOW,
    PrometheusClient,
    PrometheusError,
    Usage,
    duration_seconds,
    node_usage,
    pod_usage,
)
from daemons.apiserver import discovery
from daemons.apiserver.registry import Registry, now_rfc3339

log = logging.getLogger(__name__)

GROUP = "metrics.k8s.io"
VERSION = "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
SERVED = {GROUP: [VERSION]}
NODES = require("v1", "Node")
PODS = require("v1", "Pod")
VERBS = ["get", "list"]

Obj = dict[str, Any]
T = TypeVar("T")


def resource_list() -> Obj:
    """The group version's ``APIResourceList``: nodes and pods, read-only."""
    return {
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
        "resources": [
            {"name": "nodes", "singularName": "", "namespaced": False, "kind": "NodeMetrics", "verbs": VERBS},
            {"name": "pods", "singularName": "", "namespaced": True, "kind": "PodMetrics", "verbs": VERBS},
        ],
    }


def cpu_quantity(cores: float) -> str:
    """Cores as a canonical Kubernetes quantity at nanocore precision: ``12m``, ``4620345n``, ``2``."""
    nanocores = max(round(cores * 1e9), 0)
    for suffix, unit in (("", 10**9), ("m", 10**6), ("u", 10**3)):
        if nanocores % unit == 0:
            return f"{nanocores // unit}{suffix}"
    return f"{nanocores}n"


def memory_quantity(size: float) -> str:
    """Bytes as a canonical binary quantity: ``3Mi``, ``1234Ki``, or plain bytes when no suffix divides."""
    whole = max(round(size), 0)
    for suffix, unit in (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if whole and whole % unit == 0:
            return f"{whole // unit}{suffix}"
    return str(whole)


def window_text(seconds: float) -> str:
    """A Go ``time.Duration`` string, as metrics-server writes its window: ``1m0s``, ``30s``, ``1h0m0s``,
    ``1.5s``, ``500ms``."""
    millis = round(seconds * 1000)
    if millis < 1000:
        return f"{millis}ms"
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    whole, fraction = divmod(rest, 1000)
    text = f"{whole}.{fraction:03d}".rstrip("0") + "s" if fraction else f"{whole}s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    return f"{minutes}m{text}" if minutes else text


def _metadata(obj: Obj, timestamp: str) -> Obj:
    source = obj.get("metadata") or {}
    metadata: Obj = {"name": source["name"]}
    if source.get("namespace"):
        metadata["namespace"] = source["namespace"]
    metadata["creationTimestamp"] = timestamp
    if source.get("labels"):
        metadata["labels"] = dict(source["labels"])
    return metadata


def usage_body(usage: Usage) -> Obj:
    return {"cpu": cpu_quantity(usage.cpu), "memory": memory_quantity(usage.memory)}


def pod_metrics(pod: Obj, containers: dict[str, Usage], timestamp: str, window: str = WINDOW) -> Obj:
    """A ``PodMetrics`` object; containers in the pod spec's order; ``window``: the rate's, a Prometheus duration."""
    order = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    names = sorted(containers, key=lambda name: (order.index(name) if name in order else len(order), name))
    return {
        "kind": "PodMetrics", "apiVersion": GROUP_VERSION, "metadata": _metadata(pod, timestamp),
        "timestamp": timestamp, "window": window_text(duration_seconds(window)),
        "containers": [{"name": name, "usage": usage_body(containers[name])} for name in names],
    }


def node_metrics(node: Obj, usage: Usage, timestamp: str, window: str = WINDOW) -> Obj:
    return {
        "kind": "NodeMetrics", "apiVersion": GROUP_VERSION, "metadata": _metadata(node, timestamp),
        "timestamp": timestamp, "window": window_text(duration_seconds(window)), "usage": usage_body(usage),
    }


def metrics_list(kind: str, items: list[Obj]) -> Obj:
    return {"kind": f"{kind}List", "apiVersion": GROUP_VERSION, "metadata": {}, "items": items}


class MetricsApi:
    """Serves ``/apis/metrics.k8s.io[/v1beta1[/...]]`` from Prometheus and the registry's pods and nodes; CPU is
    a rate over ``window`` (a Prometheus duration)."""

    def __init__(self, registry: Registry, prometheus_url: str, window: str = WINDOW) -> None:
        self.registry = registry
        self.prometheus = PrometheusClient(prometheus_url)
        self.window = window

    def close(self) -> None:
        self.prometheus.close()

    async def serve(self, request: Request, segments: list[str]) -> JSONResponse:
        """``segments`` follow ``/apis/metrics.k8s.io/``."""
        if request.method != "GET":
            raise errors.MethodNotAllowed(f"{request.method} is not supported on this path")
        if not segments:
            return JSONResponse(discovery.group(GROUP, SERVED))
        rest = segments[1:]
        if segments[0] != VERSION:
            raise errors.NotFound("the server could not find the requested resource")
        if not rest:
            return JSONResponse(resource_list())
        if request.query_params.get("watch", "").lower() in ("1", "true"):
            raise errors.MethodNotAllowed("the metrics API does not support watch")
        params = request.query_params
        selectors = (params.get("labelSelector"), params.get("fieldSelector"))
        if rest[0] == "nodes" and len(rest) <= 2:
            return JSONResponse(await self.nodes(rest[1] if len(rest) == 2 else None, *selectors))
        if rest[0] == "pods" and len(rest) == 1:
            return JSONResponse(await self.pods(None, None, *selectors))
        if len(rest) in (3, 4) and rest[0] == "namespaces" and rest[2] == "pods":
            return JSONResponse(await self.pods(rest[1], rest[3] if len(rest) == 4 else None, *selectors))
        raise errors.NotFound("the server could not find the requested resource")

    async def _ask(self, read: Callable[..., T], *args: Any) -> T:
        """Run a blocking Prometheus read off the event loop; an unreachable or failing Prometheus is a 503."""
        try:
            return await run_in_threadpool(read, self.prometheus, *args)
        except errors.ConnectionFailed as error:
            log.warning("metrics API: %s", error)
            raise errors.ServiceUnavailable(f"the metrics API cannot get usage from Prometheus: {error}") from None
        except PrometheusError as error:
            log.warning("metrics API: %s", error)
            raise errors.ServiceUnavailable(f"the metrics API cannot get usage: {error}") from None

    async def pods(self, namespace: str | None, name: str | None, label_selector: str | None,
                   field_selector: str | None) -> Obj:
        if name is not None:
            assert namespace is not None
            pods = [await self.registry.get(PODS, namespace, name)]
        else:
            pods, _ = await self.registry.list(PODS, namespace, label_selector, field_selector)
        usage = await self._ask(pod_usage, namespace, self.window)
        timestamp = now_rfc3339()
        items = [pod_metrics(pod, usage[key], timestamp, self.window) for pod in pods
                 if (key := (pod["metadata"]["namespace"], pod["metadata"]["name"])) in usage]
        if name is None:
            return metrics_list("PodMetrics", items)
        if not items:
            # metrics-server's wording: the pod exists but has no samples yet.
            raise errors.not_found("podmetrics", f"{namespace}/{name}", GROUP)
        return items[0]

    async def nodes(self, name: str | None, label_selector: str | None, field_selector: str | None) -> Obj:
        if name is not None:
            nodes = [await self.registry.get(NODES, None, name)]
        else:
            nodes, _ = await self.registry.list(NODES, None, label_selector, field_selector)
        usage = await self._ask(node_usage, self.window)
        timestamp = now_rfc3339()
        items = [node_metrics(node, usage[node["metadata"]["name"]], timestamp, self.window) for node in nodes
                 if node["metadata"]["name"] in usage]
        if name is None:
            return metrics_list("NodeMetrics", items)
        if not items:
            raise errors.not_found("nodemetrics", name, GROUP)
        return items[0]
