"""Facts about the node's own network that more than one daemon needs."""

from __future__ import annotations

import socket


def primary_ipv4() -> str:
    """The source address of the default route (no packet is sent); loopback when there is no route."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("203.0.113.1", 9))  # TEST-NET-3: routed by default, never sent
            return probe.getsockname()[0]
        except OSError:
            return "127.0.0.1"
