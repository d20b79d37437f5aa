"""The life of a daemon that works against the apiserver: connect, serve metrics, run until SIGTERM or SIGINT.

Every such daemon (scheduler, controller-manager, proxy) starts and stops the same way, so a bad kubeconfig
or a taken metrics port reads the same from each, and a signal always ends in a clean ``stop()``.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from types import FrameType
from typing import Protocol

from prometheus_client import start_http_server

from daemons.api.client import ApiClient
from daemons.api.kubeconfig import KubeconfigError
from daemons.machinery.settings import DaemonSettings

log = logging.getLogger(__name__)


class Runnable(Protocol):
    def run(self) -> None: ...

    def stop(self) -> None: ...


def run_daemon(prog: str, settings: DaemonSettings, metrics_port: int, build: Callable[[ApiClient], Runnable],
               what: str, on_stop: str = "stopping") -> None:
    """Connect as ``prog``, serve /metrics on ``metrics_port`` (0: none), then ``build(client).run()`` until a signal.

    ``what`` says in the start-up log line what the daemon does; ``on_stop`` what a signal leaves behind.
    """
    try:
        client = ApiClient.from_config(settings.kubeconfig, user_agent=prog)
        if metrics_port:
            start_http_server(metrics_port)
    except (KubeconfigError, OSError) as error:
        raise SystemExit(f"{prog}: {error}") from None
    daemon = build(client)

    def stop(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: %s", signal.Signals(signum).name, on_stop)
        daemon.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("%s: %s against %s, events from %s", prog, what, client.connection.server,
             "RabbitMQ" if settings.amqp_url else "the HTTP watch")
    try:
        daemon.run()
    finally:
        client.close()
