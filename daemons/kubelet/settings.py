"""The kubelet's flags (the real one's and the hollow one's) and its node config file (name, labels, taints,
roles, address)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from daemons.api import models
from daemons.api.quantity import parse_quantity
from daemons.machinery.network import primary_ipv4 as primary_ipv4  # re-exported: kubelet main's default address
from daemons.machinery.settings import DaemonSettings, flag_name

ROLE_LABEL_PREFIX = "node-role.kubernetes.io/"
DEFAULT_POD_CIDR_FILE = "/run/flannel/subnet.env"


class KubeletSettings(DaemonSettings):
    """minik8s-kubelet: registers this node and runs the pods bound to it in Docker."""

    node_config: str = Field(..., description="YAML file with the node's name, labels, taints, roles and address")
    port: int = Field(10250, ge=1, le=65535, description="port of the kubelet's HTTPS API (logs, exec)")
    bind_address: str = Field("0.0.0.0", description="address the kubelet's HTTPS API listens on")
    tls_cert_file: str | None = Field(
        None, description="certificate of the HTTPS API; without it one is self-signed under the root dir"
    )
    tls_private_key_file: str | None = Field(None, description="private key of --tls-cert-file")
    authentication_token_file: str | None = Field(
        None, description="bearer tokens the HTTPS API accepts, one per line (without it only /healthz answers)"
    )
    root_dir: str = Field("/var/lib/minik8s/kubelet", description="state directory: emptyDir volumes, certificates")
    docker_url: str = Field("unix:///var/run/docker.sock", description="Docker Engine API endpoint")
    pod_infra_image: str = Field("pause:latest", description="image of the pause container holding a pod's namespaces")
    status_interval: float = Field(10.0, gt=0, description="seconds between heartbeats (the node's Lease renewed)")
    node_lease_duration_seconds: int = Field(40, ge=1, description="the duration the node's Lease states")
    node_status_report_frequency: float = Field(
        300.0, gt=0, description="seconds after which the node's status is posted even when it has not changed")
    resync_seconds: float = Field(30.0, ge=0, description="seconds between full resyncs of the pods on this node")
    cluster_dns: list[str] = Field(default_factory=list, description="DNS servers for pods (Docker's --dns)")
    cluster_domain: str | None = Field(None, description="cluster domain, e.g. cluster.local (pods' DNS search)")
    workers: int = Field(8, ge=1, description="pods synced in parallel")
    pod_cidr_file: str = Field(
        DEFAULT_POD_CIDR_FILE, description="the overlay's subnet file (FLANNEL_SUBNET=...): the node's spec.podCIDR"
    )
    hollow: bool = Field(
        False, description="simulate --hollow-nodes nodes without Docker, each reporting its pods Running (scale tests)"
    )
    hollow_nodes: int = Field(1, ge=1, description="hollow nodes this process simulates: <config name>-0000, ...")
    hollow_cpu: int = Field(4, ge=1, description="CPU capacity each hollow node reports")
    hollow_memory: str = Field("16Gi", description="memory capacity each hollow node reports (a quantity)")
    hollow_max_pods: int = Field(110, ge=1, description="pod capacity each hollow node reports")

    @field_validator("hollow_memory")
    @classmethod
    def _memory_quantity(cls, value: str) -> str:
        if parse_quantity(value) < 1024:
            raise ValueError("must be at least 1Ki")
        return value

    @model_validator(mode="after")
    def _certificate_and_key_together(self) -> KubeletSettings:
        if bool(self.tls_cert_file) != bool(self.tls_private_key_file):
            raise ValueError("--tls-cert-file and --tls-private-key-file go together")
        return self

    @model_validator(mode="after")
    def _hollow_flags_need_hollow(self) -> KubeletSettings:
        if not self.hollow:
            given = sorted(name for name in self.model_fields_set if name.startswith("hollow_"))
            if given:
                raise ValueError(f"{', '.join(flag_name(name) for name in given)} given without --hollow")
        return self

    def hollow_memory_kib(self) -> int:
        return int(parse_quantity(self.hollow_memory)) // 1024


class NodeConfig(BaseModel):
    """The node config file: who this node is, as the installer wrote it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[models.Taint] = Field(default_factory=list)
    roles: list[str] = Field(default_factory=list)
    address: str | None = None

    @field_validator("name")
    @classmethod
    def _dns_name(cls, value: str) -> str:
        return models.check_dns1123_subdomain(value)

    def node_labels(self) -> dict[str, str]:
        """The config's labels plus one ``node-role.kubernetes.io/<role>`` label per role."""
        return {**self.labels, **{ROLE_LABEL_PREFIX + role: "" for role in self.roles}}

    def taints_json(self) -> list[dict[str, Any]]:
        return [taint.wire() for taint in self.taints]


def load_node_config(path: str | Path) -> NodeConfig:
    """Read and validate the node config file; errors name the file and the field."""
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"cannot read node config {path}: {error}") from None
    try:
        return NodeConfig.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, item['loc']))}: {item['msg']}" for item in error.errors())
        raise ValueError(f"node config {path}: {problems}") from None
