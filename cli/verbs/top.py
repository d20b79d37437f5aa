"""``kubectl top nodes|pods``: CPU and memory usage from the metrics.k8s.io API, laid out as kubectl does."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from decimal import Decimal
from typing import Annotated, Any

import typer

from cli.printers import tabwrite
from cli.session import CLIError, Session
from cli.verbs import Selector
from daemons.api.quantity import parse_quantity
from daemons.api.resources import require
from daemons.api.times import human_duration, parse_time

METRICS_PREFIX = "/apis/metrics.k8s.io/v1beta1"
NODE_COLUMNS = ["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"]
POD_COLUMNS = ["NAME", "CPU(cores)", "MEMORY(bytes)"]
UNKNOWN = "<unknown>"
# kubectl blames a pod without metrics only once it is older than this; a younger one has not been scraped yet.
METRICS_CREATION_DELAY = 120
NODES = require("v1", "Node")
PODS = require("v1", "Pod")

Obj = dict[str, Any]

app = typer.Typer(help="Display resource (CPU/memory) usage.", no_args_is_help=True, add_completion=False)

SortBy = Annotated[str, typer.Option("--sort-by", help="Sort by cpu or memory, largest first.")]
NoHeaders = Annotated[bool, typer.Option("--no-headers", help="Leave out the column headers.")]


def _milli(quantity: str | None) -> int:
    """kubectl's ``MilliValue``: rounded up."""
    return int((parse_quantity(quantity or "0") * 1000).to_integral_value(rounding="ROUND_CEILING"))


def _bytes(quantity: str | None) -> int:
    return int(parse_quantity(quantity or "0").to_integral_value(rounding="ROUND_CEILING"))


def usage_cells(usage: dict[str, Decimal], available: Obj | None = None) -> list[str]:
    """``250m``, ``64Mi`` and, against what is available, the truncated percentages."""
    cpu_milli = int((usage["cpu"] * 1000).to_integral_value(rounding="ROUND_CEILING"))
    memory = int(usage["memory"].to_integral_value(rounding="ROUND_CEILING"))
    cells = [f"{cpu_milli}m"]
    if available is not None and "cpu" in available:
        cells.append(f"{int(cpu_milli / max(_milli(available['cpu']), 1) * 100)}%")
    cells.append(f"{memory // 2**20}Mi")
    if available is not None and "memory" in available:
        cells.append(f"{int(memory / max(_bytes(available['memory']), 1) * 100)}%")
    return cells


def _usage(usage: Obj | None) -> dict[str, Decimal]:
    usage = usage or {}
    return {"cpu": parse_quantity(usage.get("cpu") or "0"), "memory": parse_quantity(usage.get("memory") or "0")}


def _sum(containers: list[Obj]) -> dict[str, Decimal]:
    totals = {"cpu": Decimal(0), "memory": Decimal(0)}
    for container in containers:
        for key, value in _usage(container.get("usage")).items():
            totals[key] += value
    return totals


def _sort_key(sort_by: str) -> str | None:
    if sort_by and sort_by not in ("cpu", "memory"):
        raise CLIError(f"--sort-by accepts only cpu or memory, not {sort_by!r}")
    return sort_by or None


def node_lines(metrics: list[Obj], nodes: list[Obj], sort_by: str = "", headers: bool = True) -> list[str]:
    """The ``top nodes`` table: each node with metrics, then nodes without any as ``<unknown>``."""
    key = _sort_key(sort_by)
    available = {node["metadata"]["name"]: (node.get("status") or {}).get("allocatable") or {} for node in nodes}
    rows = [(item["metadata"]["name"], _usage(item.get("usage"))) for item in metrics]
    rows.sort(key=lambda row: (-row[1][key], row[0]) if key else row[0])
    lines = ["\t".join(NODE_COLUMNS)] if headers else []
    lines += ["\t".join([name, *usage_cells(usage, available.get(name, {}))]) for name, usage in rows]
    measured = {name for name, _ in rows}
    lines += ["\t".join([name] + [UNKNOWN] * 4) for name in sorted(available) if name not in measured]
    return lines


def pod_lines(metrics: list[Obj], containers: bool = False, with_namespace: bool = False, sort_by: str = "",
              headers: bool = True) -> list[str]:
    """The ``top pods`` table: per pod (its containers summed), or per container with ``--containers``."""
    key = _sort_key(sort_by)
    lines = []
    if headers:
        lines.append("\t".join((["NAMESPACE"] if with_namespace else []) + (["POD"] if containers else [])
                               + POD_COLUMNS))
    pods = [(item["metadata"].get("namespace", ""), item["metadata"]["name"], _sum(item.get("containers") or []),
             item.get("containers") or []) for item in metrics]
    pods.sort(key=lambda pod: ((-pod[2][key],) if key else ()) + ((pod[0],) if with_namespace else ()) + (pod[1],))
    for namespace, name, total, members in pods:
        prefix = ([namespace] if with_namespace else []) + ([name] if containers else [])
        if not containers:
            lines.append("\t".join([*prefix, name, *usage_cells(total)]))
            continue
        rows = [(member["name"], _usage(member.get("usage"))) for member in members]
        rows.sort(key=lambda row: (-row[1][key], row[0]) if key else row[0])
        lines += ["\t".join([*prefix, member, *usage_cells(usage)]) for member, usage in rows]
    return lines


def _require_metrics_api(session: Session) -> None:
    groups = session.client.request("GET", "/apis").get("groups") or []
    if not any(group.get("name") == "metrics.k8s.io" for group in groups):
        raise CLIError("Metrics API not available")


def _print(lines: list[str]) -> None:
    if lines:
        print("\n".join(tabwrite(lines, 3)))


@app.command("node")
@app.command("nodes", hidden=True)
@app.command("no", hidden=True)
def top_nodes(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(help="One node; all when left out.")] = None,
    selector: Selector = None,
    sort_by: SortBy = "",
    no_headers: NoHeaders = False,
) -> None:
    """Display resource (CPU/memory) usage of nodes, against their allocatable."""
    session: Session = ctx.obj
    _sort_key(sort_by)
    _require_metrics_api(session)
    params = {"labelSelector": selector} if selector and not name else None
    if name:
        metrics = [session.client.request("GET", f"{METRICS_PREFIX}/nodes/{name}")]
        nodes = [session.client.get(NODES, name)]
    else:
        metrics = session.client.request("GET", f"{METRICS_PREFIX}/nodes", params=params).get("items") or []
        nodes = session.client.list(NODES, label_selector=selector).get("items") or []
    if not metrics:
        raise CLIError("metrics not available yet")
    _print(node_lines(metrics, nodes, sort_by, headers=not no_headers))


def _unavailable(session: Session, name: str | None, selector: str | None, namespace: str | None) -> None:
    """Why no metrics came back, as kubectl tells it: a pod old enough to have been scraped has none."""
    if name:
        pods = [session.client.get(PODS, name, namespace)]
    else:
        pods = session.client.list(PODS, namespace, label_selector=selector,
                                   all_namespaces=namespace is None).get("items") or []
    if not pods:
        return
    now = datetime.now(UTC)
    for pod in pods:
        metadata = pod["metadata"]
        created = parse_time(metadata.get("creationTimestamp")) or now
        age = (now - created).total_seconds()
        if age > METRICS_CREATION_DELAY:
            raise CLIError(f"Metrics not available for pod {metadata['namespace']}/{metadata['name']}, "
                           f"age: {human_duration(age)}")
    raise CLIError("metrics not available yet")


@app.command("pod")
@app.command("pods", hidden=True)
@app.command("po", hidden=True)
def top_pods(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(help="One pod; all in the namespace when left out.")] = None,
    selector: Selector = None,
    containers: Annotated[bool, typer.Option("--containers", help="One line per container.")] = False,
    sort_by: SortBy = "",
    no_headers: NoHeaders = False,
) -> None:
    """Display resource (CPU/memory) usage of pods, summed over their containers or one line per container."""
    session: Session = ctx.obj
    _sort_key(sort_by)
    every_namespace = session.options.all_namespaces and not name
    namespace = None if every_namespace else session.namespace
    if name and selector:
        raise CLIError("only one of NAME or --selector can be provided")
    _require_metrics_api(session)
    if name:
        metrics = [session.client.request("GET", f"{METRICS_PREFIX}/namespaces/{namespace}/pods/{name}")]
    else:
        path = f"{METRICS_PREFIX}/pods" if every_namespace else f"{METRICS_PREFIX}/namespaces/{namespace}/pods"
        params = {"labelSelector": selector} if selector else None
        metrics = session.client.request("GET", path, params=params).get("items") or []
    if not metrics:
        _unavailable(session, name, selector, namespace)
        print("No resources found" if every_namespace else f"No resources found in {namespace} namespace.",
              file=sys.stderr)
        return
    _print(pod_lines(metrics, containers, every_namespace, sort_by, headers=not no_headers))
