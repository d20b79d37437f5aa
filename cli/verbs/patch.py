"""``kubectl patch``: send a strategic, merge or JSON patch to one object."""

from __future__ import annotations

from typing import Annotated, Literal

import typer
import yaml

from cli.session import CLIError, Session, object_ref, type_and_names


def patch(
    ctx: typer.Context,
    args: Annotated[list[str], typer.Argument(help="TYPE NAME or TYPE/NAME")],
    body: Annotated[str, typer.Option("--patch", "-p", help="The patch, as JSON (or YAML).")],
    patch_type: Annotated[Literal["strategic", "merge", "json"],
                          typer.Option("--type", help="strategic (default), merge or json.")] = "strategic",
) -> None:
    """Update fields of an object; prints "(no change)" when the patch left it as it was."""
    session: Session = ctx.obj
    try:
        document = yaml.safe_load(body)
    except yaml.YAMLError as error:
        raise CLIError(f"unable to parse {body!r}: {error}") from None
    wanted = list if patch_type == "json" else dict
    if not isinstance(document, wanted):
        raise CLIError(f"a {patch_type} patch must be a JSON {'list' if wanted is list else 'object'}: {body}")
    for row, names in type_and_names(args):
        if not names:
            raise CLIError("resource(s) were provided, but no name was specified")
        for name in names:
            with session.each_object():
                before = session.client.get(row, name, session.namespace)
                after = session.client.patch(row, name, document, session.namespace, patch_type=patch_type)
                moved = before["metadata"].get("resourceVersion") != after["metadata"].get("resourceVersion")
                print(f"{object_ref(row, name)} patched{'' if moved else ' (no change)'}")
