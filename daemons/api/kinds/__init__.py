"""Every served kind's row, in the order discovery and the CLIs list them.

A new kind is a module here exporting ``RESOURCE``; add that row to ``RESOURCES``.
"""

from __future__ import annotations

from daemons.api.bundle import Resource
from daemons.api.kinds import (
    configmap,
    cronjob,
    daemonset,
    deployment,
    dns,
    endpoints,
    endpointslice,
    event,
    horizontalpodautoscaler,
    job,
    lease,
    namespace,
    node,
    pod,
    replicaset,
    replicationcontroller,
    secret,
    service,
    serviceaccount,
)

RESOURCES: tuple[Resource, ...] = (
    namespace.RESOURCE,
    pod.RESOURCE,
    node.RESOURCE,
    service.RESOURCE,
    endpoints.RESOURCE,
    event.RESOURCE,
    lease.RESOURCE,
    replicaset.RESOURCE,
    deployment.RESOURCE,
    daemonset.RESOURCE,
    horizontalpodautoscaler.RESOURCE,
    dns.RESOURCE,
    job.RESOURCE,
    cronjob.RESOURCE,
    configmap.RESOURCE,
    secret.RESOURCE,
    serviceaccount.RESOURCE,
    replicationcontroller.RESOURCE,
    endpointslice.RESOURCE,
)
