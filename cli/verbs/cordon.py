"""``kubectl cordon`` and ``uncordon``: mark nodes unschedulable, or schedulable again, in ``spec.unschedulable``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.session import CLIError, Session
from cli.verbs import Selector
from daemons.api.resources import by_kind

NODES = by_kind("v1", "Node")
Nodes = Annotated[list[str] | None, typer.Argument(metavar="NODE", help="The nodes, by name.", show_default=False)]


def schedulability_outcome(node: dict[str, Any], unschedulable: bool) -> tuple[bool, str]:
    """Whether the node needs a patch, and kubectl's word for the result: ``cordoned``, ``already uncordoned``..."""
    verb = "cordoned" if unschedulable else "uncordoned"
    if bool((node.get("spec") or {}).get("unschedulable")) == unschedulable:
        return False, f"already {verb}"
    return True, verb


def selected_nodes(session: Session, verb: str, names: list[str] | None, selector: str | None) -> list[dict[str, Any]]:
    """The nodes named on the command line, or those matching ``-l``; a missing node is a server error."""
    assert NODES is not None
    if names and selector:
        raise CLIError("cannot specify both a node name and a --selector option")
    if names:
        return [session.client.get(NODES, name) for name in names]
    if selector:
        return session.client.list(NODES, label_selector=selector).get("items") or []
    raise CLIError(f"USAGE: {verb} NODE [flags]\nSee 'kubectl {verb} -h' for help and examples")


def set_unschedulable(session: Session, node: dict[str, Any], unschedulable: bool) -> None:
    """Patch one node unless it already is as wanted, and say which it was: ``node/NAME cordoned``."""
    assert NODES is not None
    name = node["metadata"]["name"]
    needed, outcome = schedulability_outcome(node, unschedulable)
    if needed:
        session.client.patch(NODES, name, {"spec": {"unschedulable": True if unschedulable else None}})
    print(f"node/{name} {outcome}")


def mark_nodes(ctx: typer.Context, verb: str, names: list[str] | None, selector: str | None,
               unschedulable: bool) -> None:
    """Cordon or uncordon every selected node; one failing does not stop the others."""
    session: Session = ctx.obj
    for node in selected_nodes(session, verb, names, selector):
        with session.each_object():
            set_unschedulable(session, node, unschedulable)


def cordon(ctx: typer.Context, names: Nodes = None, selector: Selector = None) -> None:
    """Mark nodes as unschedulable: the scheduler places no new pods there."""
    mark_nodes(ctx, "cordon", names, selector, True)


def uncordon(ctx: typer.Context, names: Nodes = None, selector: Selector = None) -> None:
    """Mark nodes as schedulable again."""
    mark_nodes(ctx, "uncordon", names, selector, False)
