"""``minik8s-proxy``: parse settings, then program the node's service rules, nginx and dnsmasq until SIGTERM or
SIGINT.

Stopping leaves everything in place, so Services keep working while the proxy
restarts; ``--cleanup`` removes the iptables rules (and only them) and exits.
"""

from __future__ import annotations

from pathlib import Path

from daemons.machinery.daemon import run_daemon
from daemons.machinery.log import setup_logging
from daemons.machinery.settings import parse_settings
from daemons.proxy.dnsmasq import DnsmasqProgrammer
from daemons.proxy.iptables import IptablesProgrammer
from daemons.proxy.nginx import NginxProgrammer
from daemons.proxy.proxier import Programmer, Proxier
from daemons.proxy.rules import NodeFacts
from daemons.proxy.settings import ProxySettings


def programmers(settings: ProxySettings) -> list[Programmer]:
    """Everything the proxy programs on the node, in the order it is programmed."""
    found: list[Programmer] = []
    if settings.iptables:
        found.append(IptablesProgrammer(NodeFacts(settings.cluster_cidr, settings.masquerade_bit)))
    if settings.nginx_config:
        found.append(NginxProgrammer(Path(settings.nginx_config), Path(settings.nginx_pid_file),
                                     Path(settings.nginx_snippets_dir), settings.nginx_listen, settings.nginx_binary))
    if settings.dns_hosts_file:
        found.append(DnsmasqProgrammer(Path(settings.dns_hosts_file)))
    return found


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
    run_daemon("minik8s-proxy", settings, settings.metrics_port,
               lambda client: Proxier(client, settings, programmers(settings)),
               f"node {settings.node_name}: proxying Services", on_stop="stopping; the rules and files stay in place")


if __name__ == "__main__":
    main()
