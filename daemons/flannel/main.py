"""``minik8s-flanneld``: parse settings, then either serve the overlay until SIGTERM or SIGINT, or ``--release``."""

from __future__ import annotations

import asyncio
import logging
import signal

from daemons.flannel.agent import Agent, release
from daemons.flannel.settings import FlannelSettings
from daemons.machinery.log import setup_logging
from daemons.machinery.settings import parse_settings

log = logging.getLogger(__name__)


async def serve(settings: FlannelSettings) -> None:
    agent = Agent(settings)

    def stop(signum: signal.Signals) -> None:
        log.info("%s: stopping; the lease, routes and rules stay for the next start", signum.name)
        agent.stop()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop, signum)
    log.info("flanneld: network %s, etcd %s prefix %s, subnet file %s", settings.network,
             ",".join(settings.etcd_endpoints), settings.etcd_prefix, settings.subnet_file)
    await agent.run()


def main(argv: list[str] | None = None) -> None:
    settings = parse_settings(FlannelSettings, argv, prog="minik8s-flanneld")
    setup_logging(settings.log_level)
    if settings.release:
        if not asyncio.run(release(settings)):
            raise SystemExit(1)
        return
    asyncio.run(serve(settings))


if __name__ == "__main__":
    main()
