"""Namespaces: DELETE only marks one Terminating; the namespace controller empties it and finalizes it."""

from __future__ import annotations

from typing import Any

from daemons.api import models, tables
from daemons.api.bundle import Column, Resource
from daemons.api.defaults import default_namespace

Obj = dict[str, Any]


COLUMNS = (
    Column("Status", "string", lambda o, _n: (o.get("status") or {}).get("phase") or "Active"),
    tables.AGE,
)

# The finalizer the namespace controller removes once the namespace is empty (upstream's FinalizerKubernetes).
FINALIZER = "kubernetes"


def deletion_hold(obj: Obj) -> bool:
    """Held while ``spec.finalizers`` lists anyone who still has to empty it."""
    return bool((obj.get("spec") or {}).get("finalizers"))


def mark_deleted(obj: Obj) -> None:
    """A namespace being deleted reads Terminating, which refuses new content."""
    obj.setdefault("status", {})["phase"] = "Terminating"


RESOURCE = Resource("Namespace", "namespaces", models.Namespace, namespaced=False, short_names=("ns",),
                    subresources=("status", "finalize"), name_format="label", columns=COLUMNS,
                    defaults=default_namespace, initial_status=lambda _obj: {"phase": "Active"},
                    deletion_hold=deletion_hold, mark_deleted=mark_deleted, propagates_deletion=False)
