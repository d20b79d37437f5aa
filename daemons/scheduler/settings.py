"""The scheduler's settings: flags and ``MINIK8S_*`` environment variables."""

from __future__ import annotations

from pydantic import Field, field_validator

from daemons.machinery.settings import DaemonSettings
from daemons.scheduler.strategies import STRATEGIES


class SchedulerSettings(DaemonSettings):
    """minik8s-scheduler: binds each unscheduled pod to a node that can run it."""

    strategy: str = Field("RoundRobin", description=f"how to pick among fitting nodes: {', '.join(STRATEGIES)}")
    resync_seconds: float = Field(30.0, gt=0, description="seconds between full re-LISTs of pods and nodes")
    workers: int = Field(1, ge=1, description="pods scheduled in parallel")
    percentage_of_nodes_to_score: int = Field(
        0, ge=0, le=100,
        description="the share of the nodes (%) that must be found fitting before a pod stops being judged against "
        "more, as kube-scheduler's percentageOfNodesToScore: 0 is adaptive (50 % less one point per 125 nodes, "
        "at least 5 %), 100 judges every node; never fewer than 100 nodes",
    )
    bind_workers: int = Field(16, ge=1, description="bindings written in parallel, in the background of placing")
    scheduler_name: str = Field(
        "default-scheduler", description="the spec.schedulerName of the pods this scheduler takes"
    )
    metrics_port: int = Field(10259, ge=0, le=65535, description="port serving Prometheus /metrics; 0 turns it off")

    @field_validator("strategy")
    @classmethod
    def _known_strategy(cls, value: str) -> str:
        if value not in STRATEGIES:
            raise ValueError(f"must be one of {', '.join(STRATEGIES)}")
        return value
