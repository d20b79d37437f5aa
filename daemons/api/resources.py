"""The resource table: one row per kind, driving routes, discovery, storage keys and the CLI.

The rows live in ``daemons/api/kinds/`` (one module per kind); this module finds them.
"""

from __future__ import annotations

from daemons.api.bundle import Resource
from daemons.api.kinds import RESOURCES

__all__ = ["NODE_LEASE_NAMESPACE", "RESOURCES", "Resource", "by_kind", "find", "groups", "require", "resolve"]

# Where each kubelet renews the Lease named after its node: its heartbeat.
NODE_LEASE_NAMESPACE = "kube-node-lease"


def find(group: str, version: str, plural: str) -> Resource | None:
    """The row served at ``/api[s]/<group>/<version>/<plural>``."""
    for resource in RESOURCES:
        if (resource.group, resource.version, resource.plural) == (group, version, plural):
            return resource
    return None


def by_kind(api_version: str, kind: str) -> Resource | None:
    """The row for a manifest's ``apiVersion`` and ``kind``."""
    for resource in RESOURCES:
        if resource.api_version == api_version and resource.kind == kind:
            return resource
    return None


def require(api_version: str, kind: str) -> Resource:
    """The row for a kind a daemon is built around; a LookupError says the table lacks it."""
    resource = by_kind(api_version, kind)
    if resource is None:
        raise LookupError(f"the resource table has no {api_version} {kind}")
    return resource


def resolve(name: str) -> Resource | None:
    """The row a user means by a name on the command line: plural, singular, short or kind, optionally ``.group``."""
    wanted, _, group = name.lower().partition(".")
    for resource in RESOURCES:
        if group and group != resource.group.lower():
            continue
        names = {resource.plural, resource.singular, resource.kind.lower(), *resource.short_names}
        if wanted in names:
            return resource
    return None


def groups() -> dict[str, list[str]]:
    """Each API group (``""`` for core) and its versions, in table order."""
    result: dict[str, list[str]] = {}
    for resource in RESOURCES:
        versions = result.setdefault(resource.group, [])
        if resource.version not in versions:
            versions.append(resource.version)
    return result
