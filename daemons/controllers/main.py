"""``minik8s-controller-manager``: parse settings, connect to the apiserver, run the controllers until SIGTERM."""

from __future__ import annotations

from daemons.controllers.manager import ControllerManager
from daemons.controllers.settings import ControllerManagerSettings
from daemons.machinery.daemon import run_daemon
from daemons.machinery.log import setup_logging
from daemons.machinery.settings import parse_settings


def main(argv: list[str] | None = None) -> None:
    settings = parse_settings(ControllerManagerSettings, argv, prog="minik8s-controller-manager")
    setup_logging(settings.log_level)
    run_daemon("minik8s-controller-manager", settings, settings.metrics_port,
               lambda client: ControllerManager(client, settings), "running controllers")


if __name__ == "__main__":
    main()
