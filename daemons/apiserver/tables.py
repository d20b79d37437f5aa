"""Server-side ``Table`` rendering with upstream kubectl's columns for each built-in kind.

Pure functions of the objects and the current time, so both kubectls print
the same thing and unit tests can check every column.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from daemons.api.selectors import LabelSelectorQuery

Obj = dict[str, Any]
Cell = str | int
Column = tuple[str, str, int, Callable[[Obj, datetime], Cell]]  # name, type, priority, cell

NONE = "<none>"


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def human_duration(seconds: float) -> str:
    """kubectl's short duration: 45s, 3m20s, 12m, 5h3m, 9h, 3d4h, 20d, 2y..."""
    seconds = int(seconds)
    if seconds < 0:
        return "<invalid>"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = hours // 24
        return f"{days // 365}y{days % 365}d" if days % 365 else f"{days // 365}y"
    return f"{hours // 24 // 365}y"


def age(obj: Obj, now: datetime) -> str:
    created = parse_time(obj.get("metadata", {}).get("creationTimestamp"))
    return human_duration((now - created).total_seconds()) if created else "<unknown>"


def _name(obj: Obj, _now: datetime) -> str:
    return obj.get("metadata", {}).get("name", "")


def _containers_images(obj: Obj) -> tuple[str, str]:
    containers = obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []
    return (",".join(c.get("name", "") for c in containers) or NONE,
            ",".join(c.get("image", "") for c in containers) or NONE)


def _selector(obj: Obj) -> str:
    return str(LabelSelectorQuery.from_label_selector(obj.get("spec", {}).get("selector"))) or NONE


# --- Pods ------------------------------------------------------------------------------------------

def pod_status_reason(pod: Obj) -> str:
    """The STATUS column: the phase, refined by container states and deletion, as kubectl shows it."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Pending"
    init_statuses = status.get("initContainerStatuses") or []
    for index, container in enumerate(init_statuses):
        state = container.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and terminated.get("exitCode") == 0:
            continue
        if terminated:
            reason = "Init:" + (terminated.get("reason") or f"ExitCode:{terminated.get('exitCode')}")
        elif waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{index}/{len(pod.get('spec', {}).get('initContainers') or [])}"
        break
    else:
        has_running = False
        for container in reversed(status.get("containerStatuses") or []):
            state = container.get("state") or {}
            if (state.get("waiting") or {}).get("reason"):
                reason = state["waiting"]["reason"]
            elif (state.get("terminated") or {}).get("reason"):
                reason = state["terminated"]["reason"]
            elif state.get("terminated"):
                terminated = state["terminated"]
                reason = (f"Signal:{terminated['signal']}" if terminated.get("signal")
                          else f"ExitCode:{terminated.get('exitCode')}")
            elif state.get("running") and container.get("ready"):
                has_running = True
        if reason == "Completed" and has_running:
            reason = "Running"
    if pod.get("metadata", {}).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason


def _pod_ready(pod: Obj, _now: datetime) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len(pod.get("spec", {}).get("containers") or [])
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _pod_restarts(pod: Obj, now: datetime) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
    last: datetime | None = None
    for container in statuses:
        finished = parse_time(((container.get("lastState") or {}).get("terminated") or {}).get("finishedAt"))
        if finished and (last is None or finished > last):
            last = finished
    if restarts and last:
        return f"{restarts} ({human_duration((now - last).total_seconds())} ago)"
    return str(restarts)


POD_COLUMNS: list[Column] = [
    ("Name", "string", 0, _name),
    ("Ready", "string", 0, _pod_ready),
    ("Status", "string", 0, lambda o, _n: pod_status_reason(o)),
    ("Restarts", "string", 0, _pod_restarts),
    ("Age", "string", 0, age),
    ("IP", "string", 1, lambda o, _n: (o.get("status") or {}).get("podIP") or NONE),
    ("Node", "string", 1, lambda o, _n: o.get("spec", {}).get("nodeName") or NONE),
    ("Nominated Node", "string", 1, lambda o, _n: (o.get("status") or {}).get("nominatedNodeName") or NONE),
    ("Readiness Gates", "string", 1, lambda o, _n: NONE),
]


# --- Nodes and namespaces ---------------------------------------------------------------------------

NODE_ROLE_PREFIX = "node-role.kubernetes.io/"
NODE_ROLE_LABEL = "kubernetes.io/role"


def node_status(node: Obj) -> str:
    """Ready while the Ready condition is True, NotReady for False or Unknown, Unknown without one; cordoned
    nodes add SchedulingDisabled."""
    conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    text = "Unknown" if "Ready" not in conditions else "Ready" if conditions["Ready"] == "True" else "NotReady"
    if node.get("spec", {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    return text


def node_roles(node: Obj) -> str:
    """The ``node-role.kubernetes.io/<role>`` keys and the ``kubernetes.io/role`` value, sorted, as kubectl."""
    roles: set[str] = set()
    for key, value in (node.get("metadata", {}).get("labels") or {}).items():
        if key.startswith(NODE_ROLE_PREFIX) and key.removeprefix(NODE_ROLE_PREFIX):
            roles.add(key.removeprefix(NODE_ROLE_PREFIX))
        elif key == NODE_ROLE_LABEL and value:
            roles.add(value)
    return ",".join(sorted(roles)) or NONE


def _node_address(kind: str) -> Callable[[Obj, datetime], str]:
    def cell(node: Obj, _now: datetime) -> str:
        for address in (node.get("status") or {}).get("addresses") or []:
            if address.get("type") == kind:
                return address.get("address", NONE)
        return NONE

    return cell


def _node_info(field: str) -> Callable[[Obj, datetime], str]:
    return lambda node, _now: ((node.get("status") or {}).get("nodeInfo") or {}).get(field) or "<unknown>"


NODE_COLUMNS: list[Column] = [
    ("Name", "string", 0, _name),
    ("Status", "string", 0, lambda o, _n: node_status(o)),
    ("Roles", "string", 0, lambda o, _n: node_roles(o)),
    ("Age", "string", 0, age),
    ("Version", "string", 0, lambda o, _n: ((o.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")),
    ("Internal-IP", "string", 1, _node_address("InternalIP")),
    ("External-IP", "string", 1, _node_address("ExternalIP")),
    ("OS-Image", "string", 1, _node_info("osImage")),
    ("Kernel-Version", "string", 1, _node_info("kernelVersion")),
    ("Container-Runtime", "string", 1, _node_info("containerRuntimeVersion")),
    # Not in upstream's table; last, so every upstream column keeps its place.
    ("Pod-CIDR", "string", 1, lambda o, _n: o.get("spec", {}).get("podCIDR") or NONE),
]

NAMESPACE_COLUMNS: list[Column] = [
    ("Name", "string", 0, _name),
    ("Status", "string", 0, lambda o, _n: (o.get("status") or {}).get("phase") or "Active"),
    ("Age", "string", 0, age),
]


# --- Services and endpoints ----------------------------------------------------------------------------

def service_ports(service: Obj) -> str:
    parts = []
    for port in service.get("spec", {}).get("ports") or []:
        text = str(port.get("port"))
        if port.get("nodePort"):
            text += f":{port['nodePort']}"
        parts.append(f"{text}/{port.get('protocol', 'TCP')}")
    return ",".join(parts) or NONE


def _service_external_ip(service: Obj, _now: datetime) -> str:
    """EXTERNAL-IP as kubectl prints it for each type: load balancer ingress only for LoadBalancer."""
    spec = service.get("spec", {})
    kind = spec.get("type") or "ClusterIP"
    external = spec.get("externalIPs") or []
    if kind in ("ClusterIP", "NodePort"):
        return ",".join(external) or NONE
    if kind == "LoadBalancer":
        ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        addresses = [entry.get("ip") or entry.get("hostname") or "" for entry in ingress] + external
        return ",".join(a for a in addresses if a) or "<pending>"
    if kind == "ExternalName":
        return spec.get("externalName") or ""
    return "<unknown>"


def _service_cluster_ip(service: Obj, _now: datetime) -> str:
    spec = service.get("spec", {})
    return (spec.get("clusterIPs") or [spec.get("clusterIP")])[0] or NONE


SERVICE_COLUMNS: list[Column] = [
    ("Name", "string", 0, _name),
    ("Type", "string", 0, lambda o, _n: o.get("spec", {}).get("type") or "ClusterIP"),
    ("Cluster-IP", "string", 0, _service_cluster_ip),
    ("External-IP", "string", 0, _service_external_ip),
    ("Port(s)", "string", 0, lambda o, _n: service_ports(o)),
    ("Age", "string", 0, age),
    ("Selector", "string", 1, lambda o, _n: ",".join(
        f"{k}={v}" for k, v in sorted((o.get("spec", {}).get("selector") or {}).items())) or NONE),
]


def endpoints_text(endpoints: Obj, limit: int = 3) -> str:
    """ENDPOINTS as kubectl prints it: ``ip:port`` for each port of each subset, then ``+ N more...``."""
    subsets = endpoints.get("subsets") or []
    if not subsets:
        return NONE
    shown: list[str] = []
    count = 0
    for subset in subsets:
        addresses = [address.get("ip", "") for address in subset.get("addresses") or []]
        ports = [port.get("port") for port in subset.get("ports") or []] or [None]
        for port in ports:
            count += len(addresses)
            for ip in addresses:
                if len(shown) < limit:
                    shown.append(ip if port is None else (f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"))
    return ",".join(shown) + (f" + {count - limit} more..." if count > limit else "")


ENDPOINTS_COLUMNS: list[Column] = [
    ("Name", "string", 0, _name),
    ("Endpoints", "string", 0, lambda o, _n: endpoints_text(o)),
    ("Age", "string", 0, age),
]


# --- Events ---------------------------------------------------------------------------------------

def _event_last_seen(event: Obj, now: datetime) -> str:
    when = parse_time(event.get("lastTimestamp") or event.get("eventTime")
                      or event.get("metadata", {}).get("creationTimestamp"))
    return human_duration((now - when).total_seconds()) if when else "<unknown>"


def _event_object(event: Obj, _now: datetime) -> str:
    involved = event.get("involvedObject") or {}
    return f"{(involved.get('kind') or '').lower()}/{involved.get('name', '')}"


def _event_source(event: Obj, _now: datetime) -> str:
    source = event.get("source") or {}
    component = source.get("component") or event.get("reportingComponent") or ""
    return f"{component}, {source['host']}" if source.get("host") else component


EVENT_COLUMNS: list[Column] = [
    ("Last Seen", "string", 0, _event_last_seen),
    ("Type", "string", 0, lambda o, _n: o.get("type") or "Normal"),
    ("Reason", "string", 0, lambda o, _n: o.get("reason") or ""),
    ("Object", "string", 0, _event_object),
    ("Subobject", "string", 1, lambda o, _n: (o.get("involvedObject") or {}).get("fieldPath") or ""),
    ("Source", "string", 1, _event_source),
    ("Message", "string", 0, lambda o, _n: (o.get("message") or "").strip()),
    ("First Seen", "string", 1, lambda o, now: human_duration(
        (now - (parse_time(o.get("firstTimestamp")) or now)).total_seconds())),
    ("Count", "string", 1, lambda o, _n: str(o.get("count") or 1)),
    ("Name", "string", 1, _name),
]


# --- Workloads ------------------------------------------------------------------------------------

REPLICASET_COLUMNS: list[Column] = [
    ("Name", "string", 0, _name),
    ("Desired", "integer", 0, lambda o, _n: int(o.get("spec", {}).get("replicas", 1))),
    ("Current", "integer", 0, lambda o, _n: int((o.get("status") or {}).get("replicas") or 0)),
    ("Ready", "integer", 0, lambda o, _n: int((o.get("status") or {}).get("readyReplicas") or 0)),
    ("Age", "string", 0, age),
    ("Containers", "string", 1, lambda o, _n: _containers_images(o)[0]),
    ("Images", "string", 1, lambda o, _n: _containers_images(o)[1]),
    ("Selector", "string", 1, lambda o, _n: _selector(o)),
]

DEPLOYMENT_COLUMNS: list[Column] = [
    ("Name", "string", 0, _name),
    ("Ready", "string", 0, lambda o, _n: f"{(o.get('status') or {}).get('readyReplicas') or 0}/"
                                         f"{o.get('spec', {}).get('replicas', 1)}"),
    ("Up-to-date", "integer", 0, lambda o, _n: int((o.get("status") or {}).get("updatedReplicas") or 0)),
    ("Available", "integer", 0, lambda o, _n: int((o.get("status") or {}).get("availableReplicas") or 0)),
    ("Age", "string", 0, age),
    ("Containers", "string", 1, lambda o, _n: _containers_images(o)[0]),
    ("Images", "string", 1, lambda o, _n: _containers_images(o)[1]),
    ("Selector", "string", 1, lambda o, _n: _selector(o)),
]


# --- Autoscaling ----------------------------------------------------------------------------------

UNKNOWN = "<unknown>"


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
            return f"{source.get('name')}: {UNKNOWN if shown is None else shown}/{target['averageValue']}"
        shown = current.get("averageUtilization")
        wanted = target.get("averageUtilization")
        return (f"{source.get('name')}: {UNKNOWN if shown is None else f'{shown}%'}/"
                f"{'<auto>' if wanted is None else f'{wanted}%'}")
    if kind in ("Pods", "Object", "External"):
        field = kind[0].lower() + kind[1:]
        target = (spec.get(field) or {}).get("target") or {}
        current = ((status or {}).get(field) or {}).get("current") or {}
        average = kind != "Pods" and target.get("averageValue") is not None
        key = "averageValue" if kind == "Pods" or average else "value"
        shown = current.get(key)
        return f"{UNKNOWN if shown is None else shown}/{target.get(key)}" + (" (avg)" if average else "")
    return "<unknown type>"


def hpa_targets(hpa: Obj, shown: int = 2) -> str:
    """TARGETS: the first two metrics against their targets, then ``+ N more...``."""
    specs = hpa.get("spec", {}).get("metrics") or []
    if not specs:
        return NONE
    statuses = (hpa.get("status") or {}).get("currentMetrics") or []
    cells = [_metric_target(spec, statuses[index] if index < len(statuses) else None)
             for index, spec in enumerate(specs)]
    more = f" + {len(cells) - shown} more..." if len(cells) > shown else ""
    return ", ".join(cells[:shown]) + more


def _hpa_reference(hpa: Obj, _now: datetime) -> str:
    reference = hpa.get("spec", {}).get("scaleTargetRef") or {}
    return f"{reference.get('kind', '')}/{reference.get('name', '')}"


HPA_COLUMNS: list[Column] = [
    ("Name", "string", 0, _name),
    ("Reference", "string", 0, _hpa_reference),
    ("Targets", "string", 0, lambda o, _n: hpa_targets(o)),
    ("MinPods", "string", 0, lambda o, _n: str(o.get("spec", {}).get("minReplicas") or "<unset>")),
    ("MaxPods", "integer", 0, lambda o, _n: int(o.get("spec", {}).get("maxReplicas") or 0)),
    ("Replicas", "integer", 0, lambda o, _n: int((o.get("status") or {}).get("currentReplicas") or 0)),
    ("Age", "string", 0, age),
]

# --- DNS (minik8s.io) -------------------------------------------------------------------------------

def _dns_paths(dns: Obj) -> list[Obj]:
    return dns.get("spec", {}).get("paths") or []


DNS_COLUMNS: list[Column] = [
    ("Name", "string", 0, _name),
    ("Host", "string", 0, lambda o, _n: o.get("spec", {}).get("host") or NONE),
    ("Paths", "string", 0, lambda o, _n: ",".join(str(p.get("path", "")) for p in _dns_paths(o)) or NONE),
    ("Age", "string", 0, age),
    ("Services", "string", 1, lambda o, _n: ",".join(
        f"{p.get('serviceName', '')}:{p.get('servicePort', '')}" for p in _dns_paths(o)) or NONE),
]

# --- Leases (coordination.k8s.io) -------------------------------------------------------------------

LEASE_COLUMNS: list[Column] = [
    ("Name", "string", 0, _name),
    ("Holder", "string", 0, lambda o, _n: (o.get("spec") or {}).get("holderIdentity") or ""),
    ("Age", "string", 0, age),
]

DEFAULT_COLUMNS: list[Column] = [("Name", "string", 0, _name), ("Age", "string", 0, age)]

COLUMNS_BY_KIND: dict[str, list[Column]] = {
    "Pod": POD_COLUMNS,
    "Node": NODE_COLUMNS,
    "Namespace": NAMESPACE_COLUMNS,
    "Service": SERVICE_COLUMNS,
    "Endpoints": ENDPOINTS_COLUMNS,
    "Event": EVENT_COLUMNS,
    "Lease": LEASE_COLUMNS,
    "ReplicaSet": REPLICASET_COLUMNS,
    "Deployment": DEPLOYMENT_COLUMNS,
    "HorizontalPodAutoscaler": HPA_COLUMNS,
    "DNS": DNS_COLUMNS,
}


def column_definitions(kind: str) -> list[dict[str, Any]]:
    return [
        {"name": name, "type": kind_, "format": "name" if name == "Name" else "", "description": "", "priority": prio}
        for name, kind_, prio, _cell in COLUMNS_BY_KIND.get(kind, DEFAULT_COLUMNS)
    ]


def partial_metadata(obj: Obj) -> Obj:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata", {})}


def table(kind: str, objects: list[Obj], resource_version: str, now: datetime | None = None,
          include_object: str = "Metadata") -> Obj:
    """A ``meta.k8s.io/v1`` Table of ``objects``; ``include_object`` as the query parameter says."""
    now = now or datetime.now(UTC)
    columns = COLUMNS_BY_KIND.get(kind, DEFAULT_COLUMNS)
    rows = []
    for obj in objects:
        row: Obj = {"cells": [cell(obj, now) for _name_, _type, _prio, cell in columns]}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = partial_metadata(obj)
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": column_definitions(kind),
        "rows": rows,
    }
