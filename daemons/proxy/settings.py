"""The proxy's settings: flags and ``MINIK8S_*`` environment variables."""

from __future__ import annotations

import ipaddress
import socket

from pydantic import Field, field_validator

from daemons.machinery.settings import DaemonSettings


def _hostname() -> str:
    return socket.gethostname().lower()


class ProxySettings(DaemonSettings):
    """minik8s-proxy: routes Services' ClusterIPs and NodePorts to their ready endpoints with iptables."""

    node_name: str = Field(default_factory=_hostname, min_length=1, description="this node's name (default: the "
                           "hostname); names the proxy's event queues, one set per node")
    cluster_cidr: str = Field("10.244.0.0/16", description="the pods' network: traffic to a ClusterIP from "
                              "outside it is masqueraded, so replies come back through this node")
    masquerade_bit: int = Field(14, ge=0, le=31, description="bit of the packet mark that asks for SNAT")
    sync_period_seconds: float = Field(30.0, gt=0, description="seconds between full rewrites of the rules, "
                                       "which also repair rules someone else removed")
    min_sync_period_seconds: float = Field(0.0, ge=0, description="least seconds between two rewrites; changes "
                                           "arriving meanwhile are applied together")
    metrics_port: int = Field(10249, ge=0, le=65535, description="port serving Prometheus /metrics; 0 turns it off")
    cleanup: bool = Field(False, description="remove every KUBE-* chain and every jump to one, then exit")

    @field_validator("cluster_cidr")
    @classmethod
    def _network(cls, value: str) -> str:
        return str(ipaddress.IPv4Network(value, strict=False))
