"""``kubectl create -f``: POST every object in the manifests."""

from __future__ import annotations

import sys

import typer

from cli import manifests
from cli.session import Session, object_ref
from cli.verbs import Filenames


def create(ctx: typer.Context, filename: Filenames = None) -> None:
    """Create each object in the manifests; one that already exists is an error."""
    session: Session = ctx.obj
    loaded = manifests.load(filename or [], sys.stdin, "create")
    placed = [(manifest, session.namespace_of(manifest.resource, manifest.body)) for manifest in loaded]
    for manifest, namespace in placed:
        with session.each_object():
            created = session.client.create(manifest.resource, manifest.body, namespace)
            print(f"{object_ref(manifest.resource, created['metadata']['name'])} created")
