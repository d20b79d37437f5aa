"""dnsmasq on the node answers the cluster's names from files the proxy keeps up to date.

Two files. The hosts file lists every Service's names and every DNS host; it sits
alone in a folder that dnsmasq watches (``hostsdir``), so a new version renamed
into place is read at once, without a signal. The servers file says which of
those names dnsmasq answers alone (``server=/<name>/``): without it, dnsmasq
answers a name's A query from the hosts file but forwards its AAAA query
upstream, and a slow upstream stalls every dual-stack lookup. dnsmasq reads the
servers file only on SIGHUP, which the proxy sends when the set of names changed.
"""

from __future__ import annotations

import logging
from pathlib import Path

from daemons.proxy.files import read_text, signal_pid_file, write_atomic
from daemons.proxy.names import ClusterView, hosts_file, servers_file

log = logging.getLogger(__name__)


class DnsmasqProgrammer:
    """Keeps ``hosts`` and ``servers`` naming the cluster's names for the dnsmasq behind ``pid_file``."""

    name = "dnsmasq"

    def __init__(self, hosts: Path, servers: Path, pid_file: Path, domain: str) -> None:
        self.hosts = hosts
        self.servers = servers
        self.pid_file = pid_file
        self.domain = domain

    def sync(self, view: ClusterView) -> None:
        servers = servers_file(view.records, self.domain)
        servers_changed = read_text(self.servers) != servers
        if servers_changed:
            write_atomic(self.servers, servers)
        hosts = hosts_file(view.records)
        if read_text(self.hosts) != hosts:
            # The temporary file's name starts with a dot, which dnsmasq's watch skips: it reads only the rename.
            write_atomic(self.hosts, hosts)
            log.info("dnsmasq: %s written with %d names", self.hosts, len(view.records))
        if servers_changed and signal_pid_file(self.pid_file):
            log.info("dnsmasq: %s written, dnsmasq reloaded", self.servers)

    def cleanup(self) -> None:
        """The files stay: dnsmasq keeps answering from them until the node is reset (playbooks/reset.yml)."""
        log.info("dnsmasq: %s and %s left in place", self.hosts, self.servers)
