"""``kubectl create -f``: POST every object in the manifests; ``kubectl create namespace NAME`` for the one
object users create by name alone."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from cli import manifests
from cli.session import CLIError, Session, object_ref
from cli.verbs import Filenames
from daemons.api.resources import require

NAMESPACES = require("v1", "Namespace")


def create(ctx: typer.Context, filename: Filenames = None,
           what: Annotated[list[str] | None, typer.Argument(help="namespace NAME (instead of -f)")] = None) -> None:
    """Create each object in the manifests, or the namespace NAME; one that already exists is an error."""
    session: Session = ctx.obj
    if what:
        if filename:
            raise CLIError("create takes either -f or namespace NAME, not both")
        if len(what) != 2 or what[0] not in ("namespace", "ns"):
            raise CLIError(f"unknown command {' '.join(what)!r} for create: only 'create namespace NAME' and "
                           "'create -f FILE' are supported")
        with session.each_object():
            session.client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": what[1]}})
            print(f"namespace/{what[1]} created")
        return
    loaded = manifests.load(filename or [], sys.stdin, "create")
    placed = [(manifest, session.namespace_of(manifest.resource, manifest.body)) for manifest in loaded]
    for manifest, namespace in placed:
        with session.each_object():
            created = session.client.create(manifest.resource, manifest.body, namespace)
            print(f"{object_ref(manifest.resource, created['metadata']['name'])} created")
