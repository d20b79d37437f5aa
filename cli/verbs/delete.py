"""``kubectl delete``: by manifest, by name, by label selector or everything of a type."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cli import manifests
from cli.session import CLIError, Session, kind_label, type_and_names
from cli.verbs import Filenames, Selector
from daemons.api.errors import NotFound
from daemons.api.resources import Resource


def delete(
    ctx: typer.Context,
    args: Annotated[list[str] | None, typer.Argument(help="TYPE NAME... or TYPE/NAME... or TYPE with -l/--all")] = None,
    filename: Filenames = None,
    selector: Selector = None,
    all_objects: Annotated[bool, typer.Option("--all", help="Delete every object of the type.")] = False,
    grace_period: Annotated[int | None, typer.Option("--grace-period", help="Seconds to let a pod stop.")] = None,
    now: Annotated[bool, typer.Option("--now", help="Stop at once (grace period 1).")] = False,
    ignore_not_found: Annotated[bool, typer.Option("--ignore-not-found", help="A missing object is fine.")] = False,
    cascade: Annotated[str, typer.Option(
        "--cascade", help="What becomes of the dependents: background (deleted after the object), foreground "
        "(deleted before it) or orphan (kept, without the reference).")] = "background",
) -> None:
    """Delete objects; pods stop gracefully unless --now or --grace-period say otherwise."""
    session: Session = ctx.obj
    if now and grace_period is not None:
        raise CLIError("--now and --grace-period cannot be specified together")
    policy, warning = propagation_policy(cascade)
    if warning:
        print(warning, file=sys.stderr)
    targets = _targets(session, args or [], filename, selector, all_objects)
    if not targets:
        print("No resources found", file=sys.stderr)
    for row, name, namespace in targets:
        with session.each_object():
            try:
                session.client.delete(row, name, namespace, grace_period_seconds=1 if now else grace_period,
                                      propagation_policy=policy)
            except NotFound:
                if not ignore_not_found:
                    raise
                continue
            print(f'{kind_label(row)} "{name}" deleted')


CASCADE_POLICIES = {"background": "Background", "foreground": "Foreground", "orphan": "Orphan"}
# kubectl's deprecated boolean spellings of --cascade.
CASCADE_BOOLEANS = {"true": "background", "false": "orphan"}


def propagation_policy(cascade: str) -> tuple[str, str | None]:
    """The DeleteOptions propagationPolicy for a ``--cascade`` value, and a warning for the boolean spellings."""
    value, warning = cascade.lower(), None
    if value in CASCADE_BOOLEANS:
        warning = (f"warning: --cascade={value} is deprecated (boolean value) and can be replaced with "
                   f"--cascade={CASCADE_BOOLEANS[value]}.")
        value = CASCADE_BOOLEANS[value]
    if value not in CASCADE_POLICIES:
        raise CLIError(f'invalid cascade value ({cascade}). Must be "background", "foreground", or "orphan".')
    return CASCADE_POLICIES[value], warning


def _targets(session: Session, args: list[str], filename: list[str] | None, selector: str | None,
             all_objects: bool) -> list[tuple[Resource, str, str | None]]:
    """(row, name, namespace) of everything to delete, found before the first deletion."""
    if filename:
        if args:
            raise CLIError("when paths are provided as input, you may not specify resource arguments as well")
        return [(manifest.resource, manifest.name, session.namespace_of(manifest.resource, manifest.body))
                for manifest in manifests.load(filename, sys.stdin, "delete")]
    targets = []
    for row, names in type_and_names(args):
        if names:
            if selector or all_objects:
                raise CLIError("name cannot be provided when a selector or --all is specified")
            targets += [(row, name, session.namespace) for name in names]
        elif selector or all_objects:
            listed = session.client.list(row, session.namespace, label_selector=selector,
                                         all_namespaces=session.options.all_namespaces)
            targets += [(row, item["metadata"]["name"], item["metadata"].get("namespace"))
                        for item in listed.get("items") or []]
        else:
            raise CLIError("resource(s) were provided, but no name was specified")
    return targets
