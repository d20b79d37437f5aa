"""``minik8s-scheduler``: parse settings, connect to the apiserver, schedule until SIGTERM or SIGINT."""

from __future__ import annotations

import logging
import signal
from types import FrameType

from prometheus_client import start_http_server

from daemons.api.client import ApiClient
from daemons.api.kubeconfig import KubeconfigError
from daemons.machinery.log import setup_logging
from daemons.machinery.settings import parse_settings
from daemons.scheduler.scheduler import Scheduler
from daemons.scheduler.settings import SchedulerSettings

log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> None:
    settings = parse_settings(SchedulerSettings, argv, prog="minik8s-scheduler")
    setup_logging(settings.log_level)
    try:
        client = ApiClient.from_config(settings.kubeconfig, user_agent="minik8s-scheduler")
        if settings.metrics_port:
            start_http_server(settings.metrics_port)
    except (KubeconfigError, OSError) as error:
        raise SystemExit(f"minik8s-scheduler: {error}") from None
    scheduler = Scheduler(client, settings)

    def stop(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: stopping", signal.Signals(signum).name)
        scheduler.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("scheduling with %s against %s, events from %s", settings.strategy, client.connection.server,
             "RabbitMQ" if settings.amqp_url else "the HTTP watch")
    try:
        scheduler.run()
    finally:
        client.close()


if __name__ == "__main__":
    main()
