"""HorizontalPodAutoscalers (autoscaling/v2): scale a workload to keep its metrics at their targets."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from daemons.api import models, tables
from daemons.api.bundle import Column, Resource
from daemons.api.defaults import default_horizontal_pod_autoscaler

Obj = dict[str, Any]


def _metric_target(spec: Obj, status: Obj | None) -> str:
    """One metric as kubectl 1.33 prints it: ``cpu: 73%/50%``, ``memory: 10Mi/100Mi``, ``<unknown>`` before data."""
    kind = spec.get("type")
    if kind in ("Resource", "ContainerResource"):
        field = "resource" if kind == "Resource" else "containerResource"
        source = spec.get(field) or {}
        target = source.get("target") or {}
        current = ((status or {}).get(field) or {}).get("current") or {}
        if target.get("averageValue") is not None:
            shown = current.get("averageValue")
            return f"{source.get('name')}: {tables.UNKNOWN if shown is None else shown}/{target['averageValue']}"
        shown = current.get("averageUtilization")
        wanted = target.get("averageUtilization")
        return (f"{source.get('name')}: {tables.UNKNOWN if shown is None else f'{shown}%'}/"
                f"{'<auto>' if wanted is None else f'{wanted}%'}")
    if kind in ("Pods", "Object", "External"):
        field = kind[0].lower() + kind[1:]
        target = (spec.get(field) or {}).get("target") or {}
        current = ((status or {}).get(field) or {}).get("current") or {}
        average = kind != "Pods" and target.get("averageValue") is not None
        key = "averageValue" if kind == "Pods" or average else "value"
        shown = current.get(key)
        return f"{tables.UNKNOWN if shown is None else shown}/{target.get(key)}" + (" (avg)" if average else "")
    return "<unknown type>"


def hpa_targets(hpa: Obj, shown: int = 2) -> str:
    """TARGETS: the first two metrics against their targets, then ``+ N more...``."""
    specs = hpa.get("spec", {}).get("metrics") or []
    if not specs:
        return tables.NONE
    statuses = (hpa.get("status") or {}).get("currentMetrics") or []
    cells = [_metric_target(spec, statuses[index] if index < len(statuses) else None)
             for index, spec in enumerate(specs)]
    more = f" + {len(cells) - shown} more..." if len(cells) > shown else ""
    return ", ".join(cells[:shown]) + more


def _hpa_reference(hpa: Obj, _now: datetime) -> str:
    reference = hpa.get("spec", {}).get("scaleTargetRef") or {}
    return f"{reference.get('kind', '')}/{reference.get('name', '')}"


COLUMNS = (
    Column("Reference", "string", _hpa_reference),
    Column("Targets", "string", lambda o, _n: hpa_targets(o)),
    Column("MinPods", "string", lambda o, _n: str(o.get("spec", {}).get("minReplicas") or "<unset>")),
    Column("MaxPods", "integer", lambda o, _n: int(o.get("spec", {}).get("maxReplicas") or 0)),
    Column("Replicas", "integer", lambda o, _n: int((o.get("status") or {}).get("currentReplicas") or 0)),
    tables.AGE,
)

RESOURCE = Resource("HorizontalPodAutoscaler", "horizontalpodautoscalers", models.HorizontalPodAutoscaler,
                    group="autoscaling", version="v2", short_names=("hpa",), subresources=("status",),
                    categories=("all",), columns=COLUMNS, defaults=default_horizontal_pod_autoscaler)
