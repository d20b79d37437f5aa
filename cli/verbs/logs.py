"""``kubectl logs``: a container's log, through the apiserver from the pod's kubelet."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cli.session import Session, pod_name


def logs(
    ctx: typer.Context,
    pod: Annotated[str, typer.Argument(help="POD or pod/POD")],
    container: Annotated[str | None, typer.Option("--container", "-c", help="The container to read.")] = None,
    tail: Annotated[int | None, typer.Option("--tail", help="Lines of recent log to show (all by default).")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep streaming new lines.")] = False,
    previous: Annotated[bool, typer.Option("--previous", "-p",
                                           help="The log of the previous, terminated container.")] = False,
) -> None:
    """Print the logs of a container in a pod."""
    session: Session = ctx.obj
    output = sys.stdout.buffer
    for chunk in session.client.logs(pod_name(pod), session.namespace, container, tail, follow, previous):
        output.write(chunk)
        output.flush()
