"""dnsmasq on the node answers the cluster's names from a hosts file the proxy keeps up to date.

The file (dnsmasq's ``addn-hosts``) lists every Service's names and every DNS
host; after writing it the proxy sends dnsmasq SIGHUP, which re-reads it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from daemons.proxy.files import read_text, signal_pid_file, write_atomic
from daemons.proxy.names import ClusterView, hosts_file

log = logging.getLogger(__name__)


class DnsmasqProgrammer:
    """Keeps ``hosts`` listing the cluster's names and the dnsmasq behind ``pid_file`` reading it."""

    name = "dnsmasq"

    def __init__(self, hosts: Path, pid_file: Path) -> None:
        self.hosts = hosts
        self.pid_file = pid_file

    def sync(self, view: ClusterView) -> None:
        text = hosts_file(view.records)
        if read_text(self.hosts) == text:
            return
        write_atomic(self.hosts, text)
        signalled = signal_pid_file(self.pid_file)
        log.info("dnsmasq: %s written with %d names%s", self.hosts, len(view.records),
                 ", dnsmasq reloaded" if signalled else "; dnsmasq is not running and reads it when it starts")

    def cleanup(self) -> None:
        """The hosts file stays: dnsmasq keeps answering from it until the node is reset (playbooks/reset.yml)."""
        log.info("dnsmasq: %s left in place", self.hosts)
