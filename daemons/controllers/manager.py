"""The controller manager: builds the selected controllers over shared informers and runs them until stopped."""

from __future__ import annotations

import logging
import threading

from daemons.api.client import ApiClient
from daemons.controllers.context import ControllerContext, ManagedController
from daemons.controllers.controllers import CONTROLLERS, select_controllers
from daemons.controllers.informers import InformerFactory
from daemons.controllers.settings import ControllerManagerSettings

log = logging.getLogger(__name__)

# An HTTP watch ends only with its stream; the informer threads are daemons, so shutdown need not wait for it.
INFORMER_STOP_SECONDS = 1.0


class ControllerManager:
    """Runs every selected controller; workers start once all shared caches are filled, so no sync sees half."""

    def __init__(self, client: ApiClient, settings: ControllerManagerSettings) -> None:
        self.informers = InformerFactory(client, settings.amqp_url, settings.resync_seconds)
        context = ControllerContext(client, self.informers, settings.workers, settings.prometheus_url,
                                    settings.horizontal_pod_autoscaler_sync_period, settings.prometheus_sd_dir,
                                    settings.node_monitor_period, settings.node_monitor_grace_period,
                                    settings.pod_eviction_timeout)
        self.controllers: list[ManagedController] = [
            CONTROLLERS[name](context) for name in select_controllers(settings.controllers)
        ]
        self._stopping = threading.Event()

    def run(self) -> None:
        """Run until ``stop``."""
        self.informers.start()
        try:
            if self.informers.wait_synced(self._stopping):
                for controller in self.controllers:
                    controller.start()
                log.info("running controllers %s over %s", ", ".join(item.name for item in self.controllers),
                         ", ".join(f"{informer.name} ({len(informer.store)})" for informer in self.informers.informers))
                self._stopping.wait()
        finally:
            for controller in self.controllers:
                controller.stop()
            self.informers.stop(INFORMER_STOP_SECONDS)

    def stop(self) -> None:
        self._stopping.set()
