"""``kubectl label`` (and, through ``update_metadata``, ``annotate``): set or remove keys with a merge patch."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from cli.session import CLIError, Session, object_ref, type_and_names
from daemons.api.models import check_label_key, check_label_value

Field = Literal["labels", "annotations"]
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Replace a key that already has a value.")]
Args = Annotated[list[str], typer.Argument(help="TYPE NAME... KEY=VAL... KEY-... (or TYPE/NAME)")]


def split_changes(args: list[str], field: Field) -> tuple[list[str], dict[str, str | None]]:
    """Split ``pod web a=b c-`` into the resource arguments and the changes (``None`` removes a key)."""
    targets: list[str] = []
    changes: dict[str, str | None] = {}
    removed: set[str] = set()
    assigned: set[str] = set()
    for arg in args:
        if "=" in arg:
            key, _, value = arg.partition("=")
        elif arg.endswith("-") and len(arg) > 1:
            key, value = arg[:-1], None
        elif changes:
            raise CLIError(f"all resources must be specified before {field[:-1]} changes: {arg}")
        else:
            targets.append(arg)
            continue
        try:
            check_label_key(key)
            if value is not None and field == "labels":
                check_label_value(value)
        except ValueError as error:
            raise CLIError(f'invalid {field[:-1]} spec: "{arg}": {error}') from None
        (removed if value is None else assigned).add(key)
        changes[key] = value
    if removed & assigned:
        raise CLIError(f"can not both modify and remove the same {field[:-1]} in one command")
    if not changes:
        raise CLIError(f"at least one {field[:-1]} update is required")
    return targets, changes


def refusals(current: dict[str, str], changes: dict[str, str | None], field: Field) -> str | None:
    """kubectl's complaint when --overwrite is off: labels differing in value, annotations present at all."""
    if field == "labels":
        clashes = [f"'{key}' already has a value ({current[key]}), and --overwrite is false"
                   for key, value in changes.items() if value is not None and key in current and current[key] != value]
        return "\n".join(clashes) or None
    clashes = [f"'{key}' already has a value ({current[key]})"
               for key, value in changes.items() if value is not None and key in current]
    return f"--overwrite is false but found the following declared annotation(s): {'; '.join(clashes)}" \
        if clashes else None


def update_metadata(session: Session, args: list[str], field: Field, overwrite: bool) -> None:
    """Apply the changes to each named object and report what happened to it."""
    targets, changes = split_changes(args, field)
    for row, names in type_and_names(targets):
        if not names:
            raise CLIError("one or more resources must be specified as <resource> <name> or <resource>/<name>")
        for name in names:
            with session.each_object():
                current = session.client.get(row, name, session.namespace)["metadata"].get(field) or {}
                refusal = None if overwrite else refusals(current, changes, field)
                if refusal:
                    raise CLIError(refusal)
                moot = all(current.get(key) == value for key, value in changes.items())
                if not moot:
                    session.client.patch(row, name, {"metadata": {field: changes}}, session.namespace)
                print(f"{object_ref(row, name)} {_outcome(field, changes, moot)}")


def _outcome(field: Field, changes: dict[str, str | None], moot: bool) -> str:
    """kubectl's word for what happened: annotate always says "annotated"; label tells the three cases apart."""
    if field == "annotations":
        return "annotated"
    if moot:
        return "not labeled"
    return "unlabeled" if all(value is None for value in changes.values()) else "labeled"


def label(ctx: typer.Context, args: Args, overwrite: Overwrite = False) -> None:
    """Add, change (--overwrite) or remove (KEY-) labels."""
    update_metadata(ctx.obj, args, "labels", overwrite)
