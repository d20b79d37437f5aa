"""``kubectl autoscale``: create an autoscaling/v2 HorizontalPodAutoscaler for a scalable workload."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.session import CLIError, Session, object_ref, type_and_names
from daemons.api.resources import Resource, require

HPAS = require("autoscaling/v2", "HorizontalPodAutoscaler")


def hpa_manifest(target: Resource, name: str, maximum: int, minimum: int | None = None,
                 cpu_percent: int | None = None, hpa_name: str | None = None) -> dict[str, Any]:
    """The HPA upstream kubectl posts: named after the target; unset bounds and metrics left to the server's
    defaults (1 replica, 80% CPU)."""
    if maximum < 1:
        raise CLIError("--max=MAXPODS is required and must be at least 1")
    if minimum is not None and minimum > maximum:
        raise CLIError(f"--max=MAXPODS must be larger or equal to --min=MINPODS, max: {maximum}, min: {minimum}")
    spec: dict[str, Any] = {"scaleTargetRef": {"apiVersion": target.api_version, "kind": target.kind, "name": name},
                            "maxReplicas": maximum}
    if minimum is not None:
        spec["minReplicas"] = minimum
    if cpu_percent is not None:
        spec["metrics"] = [{"type": "Resource", "resource": {
            "name": "cpu", "target": {"type": "Utilization", "averageUtilization": cpu_percent}}}]
    return {"apiVersion": HPAS.api_version, "kind": HPAS.kind, "metadata": {"name": hpa_name or name}, "spec": spec}


def autoscale(
    ctx: typer.Context,
    args: Annotated[list[str], typer.Argument(help="TYPE NAME or TYPE/NAME, e.g. deployment/web")],
    maximum: Annotated[int, typer.Option("--max", help="The upper limit for the number of pods.")] = -1,
    minimum: Annotated[int | None, typer.Option("--min", help="The lower limit for the number of pods.")] = None,
    cpu_percent: Annotated[int | None, typer.Option(
        "--cpu-percent", help="The target average CPU utilization over all the pods, as a percentage of what "
        "they request; unset: the server's default (80%).")] = None,
    name: Annotated[str | None, typer.Option("--name", help="The HPA's name; the target's by default.")] = None,
) -> None:
    """Keep a deployment's or replica set's size between --min and --max, following CPU usage."""
    session: Session = ctx.obj
    for row, names in type_and_names(args):
        if "scale" not in row.subresources:
            raise CLIError(f"cannot autoscale {row.plural}: they have no scale subresource")
        if not names:
            raise CLIError("resource(s) were provided, but no name was specified")
        for target in names:
            with session.each_object():
                manifest = hpa_manifest(row, target, maximum, minimum, cpu_percent, name)
                session.client.create(HPAS, manifest, session.namespace)
                print(f"{object_ref(HPAS, manifest['metadata']['name'])} autoscaled")
