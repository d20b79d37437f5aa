"""minik8s-flanneld's settings: flags and ``MINIK8S_*`` environment variables.

Not a DaemonSettings: flanneld talks to etcd, never to the apiserver or the
event bus, so a kubeconfig or an AMQP URL would mean nothing to it.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from daemons.flannel.network import NetworkConfig
from daemons.machinery.log import LEVELS


class FlannelSettings(BaseModel):
    """minik8s-flanneld: leases this node a pod subnet in etcd and routes every other node's subnet over VXLAN."""

    model_config = ConfigDict(extra="forbid")

    etcd_endpoints: list[str] = Field(["http://127.0.0.1:2379"], min_length=1, description="etcd client URLs")
    etcd_prefix: str = Field("/coreos.com/network", description="etcd key prefix of the network config and leases")
    network: IPv4Network = Field(
        IPv4Network("10.244.0.0/16"), description="cluster pod network, stored in etcd unless a config is there"
    )
    subnet_len: int = Field(24, description="prefix length of each node's subnet (stored with --network)")
    vni: int = Field(1, ge=1, le=2**24 - 1, description="VXLAN network identifier (stored with --network)")
    vxlan_port: int = Field(8472, ge=1, le=65535, description="VXLAN UDP port (stored with --network)")
    subnet_lease_ttl_seconds: int = Field(86400, ge=10, description="etcd lease TTL of this node's subnet")
    subnet_file: Path = Field(Path("/run/flannel/subnet.env"), description="where FLANNEL_SUBNET etc. are written")
    public_ip: IPv4Address | None = Field(
        None, description="this node's underlay address (default: the address of the default route's interface)"
    )
    iface: str | None = Field(None, description="underlay interface (default: the one holding --public-ip)")
    ip_masq: bool = Field(True, description="masquerade traffic from pods to outside the pod network")
    resync_seconds: float = Field(30.0, gt=0, description="seconds between full reconciles of routes and leases")
    release: bool = Field(False, description="give up this node's lease, device, routes and rules, then exit")
    log_level: str = Field("INFO", description="log level: DEBUG, INFO, WARNING, ERROR or CRITICAL")

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        if value.upper() not in LEVELS:
            raise ValueError(f"must be one of {', '.join(LEVELS)}")
        return value.upper()

    @model_validator(mode="after")
    def _subnet_fits(self) -> FlannelSettings:
        self.network_config()
        return self

    def network_config(self) -> NetworkConfig:
        """The config these flags describe: what flanneld stores when etcd holds none."""
        return NetworkConfig(self.network, self.subnet_len, self.vni, self.vxlan_port)
