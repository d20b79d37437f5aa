"""dnsmasq on the node answers the cluster's names from a hosts file the proxy keeps up to date.

The file lists every Service's names and every DNS host. It sits alone in a
folder that dnsmasq watches (``hostsdir``): when the proxy renames a new file
into place, dnsmasq's inotify sees it and swaps that file's names, leaving its
cache and its upstream servers alone. No signal is sent: SIGHUP would also
reset the upstream servers, and a lookup forwarded at that moment was lost,
leaving its client to wait out the resolver's 5-second timeout.
"""

from __future__ import annotations

import logging
from pathlib import Path

from daemons.api.files import write_atomic
from daemons.proxy.files import read_text
from daemons.proxy.names import ClusterView, hosts_file

log = logging.getLogger(__name__)


class DnsmasqProgrammer:
    """Keeps ``hosts`` listing the cluster's names; the dnsmasq watching its folder reads each new version."""

    name = "dnsmasq"

    def __init__(self, hosts: Path) -> None:
        self.hosts = hosts

    def sync(self, view: ClusterView) -> None:
        text = hosts_file(view.records)
        if read_text(self.hosts) == text:
            return
        # The temporary file's name starts with a dot, which dnsmasq's watch skips: it reads only the rename.
        write_atomic(self.hosts, text)
        log.info("dnsmasq: %s written with %d names", self.hosts, len(view.records))

    def cleanup(self) -> None:
        """The hosts file stays: dnsmasq keeps answering from it until the node is reset (playbooks/reset.yml)."""
        log.info("dnsmasq: %s left in place", self.hosts)
