"""``kubectl logs``: a container's log, through the apiserver from the pod's kubelet."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from cli.session import CLIError, Session, pod_name, resource_type
from daemons.api.kinds.job import CONTROLLER_UID_LABEL
from daemons.api.resources import require
from daemons.api.selectors import LabelSelectorQuery

PODS = require("v1", "Pod")
# Kinds whose logs are their first pod's, as upstream's logs for a controller.
POD_OWNERS = ("Job",)
PHASE_ORDER = {"Running": 0, "Succeeded": 1, "Failed": 1, "Pending": 2}


def _log_order(pod: dict[str, Any]) -> tuple[Any, ...]:
    """Upstream's ByLogging: scheduled first, running first, ready first, then the oldest."""
    status = pod.get("status") or {}
    ready = any(item.get("type") == "Ready" and item.get("status") == "True" for item in status.get("conditions") or [])
    return (not (pod.get("spec") or {}).get("nodeName"), PHASE_ORDER.get(status.get("phase") or "", 3), not ready,
            (pod.get("metadata") or {}).get("creationTimestamp") or "")


def target_pod(session: Session, text: str) -> str:
    """The pod whose log ``text`` names: ``POD``, ``pod/POD``, or ``job/NAME`` for the Job's first pod."""
    kind, _, name = text.rpartition("/")
    if not kind or resource_type(kind).kind not in POD_OWNERS:
        return pod_name(text)
    owner = resource_type(kind)
    found = session.client.get(owner, name, session.namespace)
    uid = (found.get("metadata") or {}).get("uid")
    selector = LabelSelectorQuery.from_label_selector(
        (found.get("spec") or {}).get("selector") or {"matchLabels": {CONTROLLER_UID_LABEL: uid}})
    pods = sorted(session.client.list(PODS, session.namespace, label_selector=str(selector)).get("items") or [],
                  key=_log_order)
    if not pods:
        raise CLIError(f"timed out waiting for the condition on {owner.plural}/{name}")
    if len(pods) > 1:
        print(f"Found {len(pods)} pods, using pod/{pods[0]['metadata']['name']}", file=sys.stderr)
    return pods[0]["metadata"]["name"]


def logs(
    ctx: typer.Context,
    pod: Annotated[str, typer.Argument(help="POD, pod/POD or job/NAME")],
    container: Annotated[str | None, typer.Option("--container", "-c", help="The container to read.")] = None,
    tail: Annotated[int | None, typer.Option("--tail", help="Lines of recent log to show (all by default).")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep streaming new lines.")] = False,
    previous: Annotated[bool, typer.Option("--previous", "-p",
                                           help="The log of the previous, terminated container.")] = False,
) -> None:
    """Print the logs of a container in a pod."""
    session: Session = ctx.obj
    output = sys.stdout.buffer
    for chunk in session.client.logs(target_pod(session, pod), session.namespace, container, tail, follow, previous):
        output.write(chunk)
        output.flush()
