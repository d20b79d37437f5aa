"""Leases (coordination.k8s.io): node heartbeats and leader election."""

from __future__ import annotations

from daemons.api import models, tables
from daemons.api.bundle import Column, Resource

COLUMNS = (
    Column("Holder", "string", lambda o, _n: (o.get("spec") or {}).get("holderIdentity") or ""),
    tables.AGE,
)

RESOURCE = Resource("Lease", "leases", models.Lease, group="coordination.k8s.io", has_status=False, columns=COLUMNS)
