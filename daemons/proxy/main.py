"""``minik8s-proxy``: parse settings, then program the node's service rules until SIGTERM or SIGINT.

Stopping leaves the rules in place, so Services keep working while the proxy
restarts; ``--cleanup`` removes them (and only them) and exits.
"""

from __future__ import annotations

import logging
import signal
from types import FrameType

from prometheus_client import start_http_server

from daemons.api.client import ApiClient
from daemons.api.kubeconfig import KubeconfigError
from daemons.machinery.log import setup_logging
from daemons.machinery.settings import parse_settings
from daemons.proxy.iptables import IptablesProgrammer
from daemons.proxy.proxier import Programmer, Proxier
from daemons.proxy.rules import NodeFacts
from daemons.proxy.settings import ProxySettings

log = logging.getLogger(__name__)


def programmers(settings: ProxySettings) -> list[Programmer]:
    """Everything the proxy programs on the node, in the order it is programmed."""
    return [IptablesProgrammer(NodeFacts(settings.cluster_cidr, settings.masquerade_bit))]


def main(argv: list[str] | None = None) -> None:
    settings = parse_settings(ProxySettings, argv, prog="minik8s-proxy")
    setup_logging(settings.log_level)
    if settings.cleanup:
        try:
            for programmer in programmers(settings):
                programmer.cleanup()
        except Exception as error:
            raise SystemExit(f"minik8s-proxy: cleanup failed: {error}") from None
        return
    try:
        client = ApiClient.from_config(settings.kubeconfig, user_agent="minik8s-proxy")
        if settings.metrics_port:
            start_http_server(settings.metrics_port)
    except (KubeconfigError, OSError) as error:
        raise SystemExit(f"minik8s-proxy: {error}") from None
    proxier = Proxier(client, settings, programmers(settings))

    def stop(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: stopping; the rules stay in place", signal.Signals(signum).name)
        proxier.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("node %s: proxying Services from %s, events from %s", settings.node_name, client.connection.server,
             "RabbitMQ" if settings.amqp_url else "the HTTP watch")
    try:
        proxier.run()
    finally:
        client.close()


if __name__ == "__main__":
    main()
