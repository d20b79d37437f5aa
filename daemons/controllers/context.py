"""What every controller of the daemon is built from, and what the manager needs of a built one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from daemons.api.client import ApiClient
from daemons.controllers.informers import InformerFactory


@dataclass(frozen=True)
class ControllerContext:
    """The API client, the shared informers, and the daemon-wide tuning each controller applies."""

    client: ApiClient
    informers: InformerFactory
    workers: int
    prometheus_url: str | None = None
    horizontal_pod_autoscaler_sync_period: float = 15.0
    prometheus_sd_dir: str | None = None
    node_monitor_period: float = 5.0
    node_monitor_grace_period: float = 40.0
    pod_eviction_timeout: float = 30.0


class ManagedController(Protocol):
    """A controller the manager runs: its workers start once the shared caches are filled."""

    name: str

    def start(self) -> None: ...

    def stop(self) -> None: ...
