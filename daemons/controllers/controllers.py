"""The controllers this daemon can run: adding one is one row in ``CONTROLLERS``.

``--controllers`` picks among them as kube-controller-manager's flag does: ``*``
stands for every known controller, a name turns one on and ``-name`` turns one off.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from daemons.controllers.context import ControllerContext, ManagedController
from daemons.controllers.cronjob import CronJobController
from daemons.controllers.daemonset import DaemonSetController
from daemons.controllers.deployment import DeploymentController
from daemons.controllers.endpoints import EndpointsController
from daemons.controllers.garbagecollector import GarbageCollector
from daemons.controllers.job import JobController
from daemons.controllers.namespace import NamespaceController
from daemons.controllers.nodelifecycle import NodeLifecycleController
from daemons.controllers.podautoscaler import HorizontalPodAutoscalingController
from daemons.controllers.prometheus_sd import PrometheusSDController
from daemons.controllers.replicaset import ReplicaSetController, ReplicationManager
from daemons.controllers.serviceaccount import ServiceAccountsController

CONTROLLERS: dict[str, Callable[[ControllerContext], ManagedController]] = {
    "endpoints": EndpointsController,
    "replicaset": ReplicaSetController,
    "replicationcontroller": ReplicationManager,
    "deployment": DeploymentController,
    "daemonset": DaemonSetController,
    "garbagecollector": GarbageCollector,
    "horizontalpodautoscaling": HorizontalPodAutoscalingController,
    "prometheus-sd": PrometheusSDController,
    "nodelifecycle": NodeLifecycleController,
    "job": JobController,
    "cronjob": CronJobController,
    "serviceaccount": ServiceAccountsController,
    "namespace": NamespaceController,
}


def check_selection(requested: Iterable[str], known: Iterable[str] = CONTROLLERS) -> list[str]:
    """``requested`` unchanged if every entry is ``*``, ``name`` or ``-name`` of a known controller."""
    names = set(known)
    requested = list(requested)
    unknown = [entry for entry in requested if entry != "*" and entry.removeprefix("-") not in names]
    if unknown:
        raise ValueError(f"unknown controller(s) {', '.join(unknown)}; known: *, {', '.join(sorted(names))}")
    return requested


def select_controllers(requested: Iterable[str], known: Iterable[str] = CONTROLLERS) -> list[str]:
    """The controllers to run, in the table's order: those named or covered by ``*``, less those named ``-name``."""
    requested = set(requested)
    return [name for name in known if f"-{name}" not in requested and ("*" in requested or name in requested)]
