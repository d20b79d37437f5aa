"""``minik8s-controller-manager``: parse settings, connect to the apiserver, run the controllers until SIGTERM."""

from __future__ import annotations

import logging
import signal
from types import FrameType

from prometheus_client import start_http_server

from daemons.api.client import ApiClient
from daemons.api.kubeconfig import KubeconfigError
from daemons.controllers.manager import ControllerManager
from daemons.controllers.settings import ControllerManagerSettings
from daemons.machinery.log import setup_logging
from daemons.machinery.settings import parse_settings

log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> None:
    settings = parse_settings(ControllerManagerSettings, argv, prog="minik8s-controller-manager")
    setup_logging(settings.log_level)
    try:
        client = ApiClient.from_config(settings.kubeconfig, user_agent="minik8s-controller-manager")
        if settings.metrics_port:
            start_http_server(settings.metrics_port)
    except (KubeconfigError, OSError) as error:
        raise SystemExit(f"minik8s-controller-manager: {error}") from None
    manager = ControllerManager(client, settings)

    def stop(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: stopping", signal.Signals(signum).name)
        manager.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("controllers against %s, events from %s", client.connection.server,
             "RabbitMQ" if settings.amqp_url else "the HTTP watch")
    try:
        manager.run()
    finally:
        client.close()


if __name__ == "__main__":
    main()
