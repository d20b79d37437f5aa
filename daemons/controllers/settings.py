"""The controller manager's settings: flags and ``MINIK8S_*`` environment variables."""

from __future__ import annotations

from pydantic import Field, field_validator

from daemons.controllers.controllers import CONTROLLERS, check_selection
from daemons.machinery.settings import DaemonSettings


class ControllerManagerSettings(DaemonSettings):
    """minik8s-controller-manager: runs the controllers that keep the cluster's objects consistent."""

    controllers: list[str] = Field(
        ["*"], description=f"controllers to run: * for all ({', '.join(CONTROLLERS)}), a name to add one, "
        "-name to leave one out"
    )
    workers: int = Field(5, ge=1, description="keys each controller syncs in parallel")
    resync_seconds: float = Field(30.0, gt=0, description="seconds between full re-LISTs of every watched resource")
    metrics_port: int = Field(10257, ge=0, le=65535, description="port serving Prometheus /metrics; 0 turns it off")
    prometheus_url: str | None = Field(
        None, description="Prometheus the autoscaler reads pod CPU and memory from, e.g. http://127.0.0.1:9090"
    )
    horizontal_pod_autoscaler_sync_period: float = Field(
        15.0, gt=0, description="seconds between two evaluations of each HorizontalPodAutoscaler"
    )
    prometheus_sd_dir: str | None = Field(
        None, description="folder where the scrape targets of every node's kubelet and proxy are written as "
        "Prometheus file_sd JSON; unset: none are written"
    )
    node_monitor_period: float = Field(
        5.0, gt=0, description="seconds between two checks of every node's heartbeat"
    )
    node_monitor_grace_period: float = Field(
        40.0, gt=0, description="seconds a node's kubelet may go without posting status before the node is "
        "marked Unknown and tainted unreachable"
    )
    pod_eviction_timeout: float = Field(
        30.0, ge=0, description="seconds the pods of an unreachable node stay before they are deleted, unless a "
        "toleration of the taint says otherwise"
    )

    @field_validator("controllers")
    @classmethod
    def _known_controllers(cls, value: list[str]) -> list[str]:
        return check_selection(value)
