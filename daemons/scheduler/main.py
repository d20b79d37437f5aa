"""``minik8s-scheduler``: parse settings, connect to the apiserver, schedule until SIGTERM or SIGINT."""

from __future__ import annotations

from daemons.machinery.daemon import run_daemon
from daemons.machinery.log import setup_logging
from daemons.machinery.settings import parse_settings
from daemons.scheduler.scheduler import Scheduler
from daemons.scheduler.settings import SchedulerSettings


def main(argv: list[str] | None = None) -> None:
    settings = parse_settings(SchedulerSettings, argv, prog="minik8s-scheduler")
    setup_logging(settings.log_level)
    run_daemon("minik8s-scheduler", settings, settings.metrics_port, lambda client: Scheduler(client, settings),
               f"scheduling with {settings.strategy}, {settings.percentage_of_nodes_to_score or 'adaptive'} % of nodes "
               f"scored, {settings.bind_workers} bind workers")


if __name__ == "__main__":
    main()
