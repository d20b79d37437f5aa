"""``kubectl apply -f``: server-side apply of every object in the manifests."""

from __future__ import annotations

import sys

import typer

from cli import manifests
from cli.session import Session, object_ref
from cli.verbs import Filenames
from daemons.api.errors import NotFound


def apply(ctx: typer.Context, filename: Filenames = None) -> None:
    """Create or update each object in the manifests (server-side apply, field manager "kubectl")."""
    session: Session = ctx.obj
    placed = []
    for manifest in manifests.load(filename or [], sys.stdin, "apply"):
        if not manifest.name:
            raise manifests.ManifestError(f'{manifest.where}: missing required field "metadata.name" '
                                          "(generateName only works with create)")
        placed.append((manifest, session.namespace_of(manifest.resource, manifest.body)))
    for manifest, namespace in placed:
        with session.each_object():
            try:
                before = session.client.get(manifest.resource, manifest.name, namespace)
            except NotFound:
                before = None
            after = session.client.patch(manifest.resource, manifest.name, manifest.body, namespace,
                                         patch_type="apply", field_manager="kubectl", force=True)
            if before is None:
                outcome = "created"
            elif before["metadata"].get("resourceVersion") == after["metadata"].get("resourceVersion"):
                outcome = "unchanged"
            else:
                outcome = "configured"
            print(f"{object_ref(manifest.resource, manifest.name)} {outcome}")
