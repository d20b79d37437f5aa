"""``kubectl scale``: set replicas through the ``scale`` subresource."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.session import CLIError, Session, object_ref, type_and_names


def scale(
    ctx: typer.Context,
    args: Annotated[list[str], typer.Argument(help="TYPE NAME... or TYPE/NAME...")],
    replicas: Annotated[int, typer.Option("--replicas", min=0, help="The number of replicas wanted.")],
) -> None:
    """Set a new size for a deployment or replica set."""
    session: Session = ctx.obj
    for row, names in type_and_names(args):
        if "scale" not in row.subresources:
            raise CLIError(f"cannot scale {row.plural}: they have no scale subresource")
        if not names:
            raise CLIError("resource(s) were provided, but no name was specified")
        for name in names:
            with session.each_object():
                session.client.patch(row, name, {"spec": {"replicas": replicas}}, session.namespace,
                                     subresource="scale")
                print(f"{object_ref(row, name)} scaled")
