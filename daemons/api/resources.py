"""The resource table: one row per kind, driving routes, discovery, storage keys and the CLI.

A later kind is added by writing its model and appending a row to ``RESOURCES``.
"""

from __future__ import annotations

from daemons.api import models
from daemons.api.bundle import Resource

RESOURCES: tuple[Resource, ...] = (
    Resource("Namespace", "namespaces", models.Namespace, namespaced=False, short_names=("ns",),
             subresources=("status",), name_format="label"),
    Resource("Pod", "pods", models.Pod, short_names=("po",), subresources=("status", "binding", "log", "exec"),
             categories=("all",)),
    Resource("Node", "nodes", models.Node, namespaced=False, short_names=("no",), subresources=("status",)),
    Resource("Service", "services", models.Service, short_names=("svc",), subresources=("status",),
             categories=("all",), name_format="dns1035"),
    Resource("Endpoints", "endpoints", models.Endpoints, short_names=("ep",), has_status=False),
    Resource("Event", "events", models.Event, short_names=("ev",), has_status=False),
    Resource("Lease", "leases", models.Lease, group="coordination.k8s.io", has_status=False),
    Resource("ReplicaSet", "replicasets", models.ReplicaSet, group="apps", short_names=("rs",),
             subresources=("status", "scale"), categories=("all",)),
    Resource("Deployment", "deployments", models.Deployment, group="apps", short_names=("deploy",),
             subresources=("status", "scale"), categories=("all",)),
    Resource("HorizontalPodAutoscaler", "horizontalpodautoscalers", models.HorizontalPodAutoscaler,
             group="autoscaling", version="v2", short_names=("hpa",), subresources=("status",), categories=("all",)),
    Resource("DNS", "dns", models.DNS, group="minik8s.io", has_status=False),
)


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
