"""The proxy's settings: flags and ``MINIK8S_*`` environment variables."""

from __future__ import annotations

import ipaddress
import socket

from pydantic import Field, field_validator

from daemons.machinery.network import primary_ipv4
from daemons.machinery.settings import DaemonSettings


def _hostname() -> str:
    return socket.gethostname().lower()


class ProxySettings(DaemonSettings):
    """minik8s-proxy: routes Services' ClusterIPs and NodePorts to their ready endpoints with iptables, DNS hosts'
    paths to Services with nginx, and the cluster's names with dnsmasq."""

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
    cleanup: bool = Field(False, description="remove every KUBE-* chain and every jump to one, then exit (nginx's "
                          "and dnsmasq's files stay: nginx and dnsmasq run from them until the node is reset)")
    iptables: bool = Field(True, description="program the Services' iptables rules; --no-iptables leaves iptables "
                           "alone")
    node_ip: str = Field(default_factory=primary_ipv4, description="the address DNS hosts resolve to, where this "
                         "node's nginx answers (default: the source address of the default route)")
    cluster_domain: str = Field("cluster.local", min_length=1, description="Services are named "
                                "<service>.<namespace>.svc.<domain>")
    nginx_config: str = Field("/var/lib/minik8s/proxy/nginx.conf", description="nginx's main configuration, "
                              "rendered from the DNS objects; empty: nginx is not programmed")
    nginx_pid_file: str = Field("/run/minik8s/nginx.pid", description="nginx's pid file: nginx is sent SIGHUP "
                                "after each new configuration")
    nginx_port: int = Field(80, ge=1, le=65535, description="port nginx serves the DNS hosts on")
    nginx_listen_address: str = Field("", description="address nginx serves the DNS hosts on; empty: every address")
    nginx_snippets_dir: str = Field("/etc/minik8s/nginx.d", description="directory whose *.conf files nginx's "
                                    "configuration includes at http level (an operator's settings)")
    nginx_binary: str = Field("nginx", min_length=1, description="nginx executable, which tests each configuration "
                              "(nginx -t) before it replaces the running one")
    dns_hosts_file: str = Field("/var/lib/minik8s/proxy/dns/hosts", description="hosts file of the cluster's "
                                "names, alone in a folder that dnsmasq watches (hostsdir); empty: dnsmasq is not "
                                "programmed")

    @field_validator("cluster_cidr")
    @classmethod
    def _network(cls, value: str) -> str:
        return str(ipaddress.IPv4Network(value, strict=False))

    @field_validator("node_ip")
    @classmethod
    def _address(cls, value: str) -> str:
        return str(ipaddress.IPv4Address(value))

    @field_validator("nginx_listen_address")
    @classmethod
    def _listen_address(cls, value: str) -> str:
        return str(ipaddress.IPv4Address(value)) if value else value

    @field_validator("cluster_domain")
    @classmethod
    def _domain(cls, value: str) -> str:
        return value.strip(".").lower()

    @property
    def nginx_listen(self) -> str:
        """nginx's ``listen`` parameter: ``[address:]port``."""
        return f"{self.nginx_listen_address}:{self.nginx_port}" if self.nginx_listen_address else str(self.nginx_port)
