"""``kubectl exec``: run a command in a container and pass on its output and exit code."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cli.session import CLIError, Session, pod_name


def exec_command(
    ctx: typer.Context,
    pod: Annotated[str, typer.Argument(help="POD or pod/POD")],
    command: Annotated[list[str] | None, typer.Argument(help="-- COMMAND [ARGS...]")] = None,
    container: Annotated[str | None, typer.Option("--container", "-c", help="The container to run in.")] = None,
) -> None:
    """Execute a command in a container (no terminal, no standard input)."""
    session: Session = ctx.obj
    if not command:
        raise CLIError("you must specify at least one command for the container")
    result = session.client.exec(pod_name(pod), command, session.namespace, container)
    sys.stdout.write(result.get("stdout") or "")
    sys.stderr.write(result.get("stderr") or "")
    code = int(result.get("exitCode") or 0)
    if code:
        raise typer.Exit(code)
