"""The apiserver's settings: flags and ``MINIK8S_*`` environment variables."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from daemons.api.models import check_ip
from daemons.api.usage import WINDOW, duration_seconds
from daemons.apiserver.services import (
    DEFAULT_CLUSTER_IP_RANGE,
    DEFAULT_NODE_PORT_RANGE,
    ServiceNetwork,
    parse_cidr,
    parse_port_range,
)
from daemons.machinery.settings import DaemonSettings


class ApiServerSettings(DaemonSettings):
    """minik8s-apiserver: the Kubernetes REST API over etcd, publishing every change to the event bus."""

    etcd_servers: str = Field("http://127.0.0.1:2379", description="etcd client URL(s), comma-separated")
    bind_address: str = Field("0.0.0.0", description="address to listen on")
    secure_port: int = Field(6443, ge=1, le=65535, description="port to listen on (HTTPS when TLS files are given)")
    tls_cert_file: str | None = Field(None, description="PEM certificate served to clients")
    tls_private_key_file: str | None = Field(None, description="PEM private key of --tls-cert-file")
    token_auth_file: str | None = Field(
        None, description="static token file (token,user,uid,\"group1,group2\"); without it no authentication"
    )

    service_cluster_ip_range: str = Field(
        DEFAULT_CLUSTER_IP_RANGE, description="IPv4 CIDR the Services' cluster IPs come from; its first address is "
        "the kubernetes Service's")
    service_node_port_range: str = Field(DEFAULT_NODE_PORT_RANGE, description="ports NodePort Services may use "
                                         "(FIRST-LAST, both included)")
    advertise_address: str | None = Field(
        None, description="IP published in the default/kubernetes Endpoints (default: the address of the "
        "default route, else 127.0.0.1)")

    kubelet_client_token_file: str | None = Field(
        None, description="file holding the bearer token presented to kubelets for pods/log and pods/exec"
    )
    kubelet_certificate_authority: str | None = Field(
        None, description="CA bundle to verify kubelets' serving certificates (unverified when absent)"
    )
    prometheus_url: str | None = Field(
        None, description="Prometheus behind the metrics.k8s.io API (kubectl top), e.g. http://127.0.0.1:9090; "
        "unset: that API is not served"
    )
    metrics_window: str = Field(
        WINDOW, description="Prometheus duration the metrics API's CPU figures are a rate over (metrics-server's "
        "window); Prometheus must scrape the kubelets several times within it"
    )

    @field_validator("service_cluster_ip_range")
    @classmethod
    def _cidr(cls, value: str) -> str:
        parse_cidr(value)
        return value

    @field_validator("service_node_port_range")
    @classmethod
    def _ports(cls, value: str) -> str:
        parse_port_range(value)
        return value

    @field_validator("metrics_window")
    @classmethod
    def _window(cls, value: str) -> str:
        duration_seconds(value)
        return value

    @field_validator("advertise_address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        return check_ip(value) if value else None

    @property
    def service_network(self) -> ServiceNetwork:
        return ServiceNetwork.parse(self.service_cluster_ip_range, self.service_node_port_range)

    @model_validator(mode="after")
    def _tls_pair(self) -> ApiServerSettings:
        if bool(self.tls_cert_file) != bool(self.tls_private_key_file):
            raise ValueError("--tls-cert-file and --tls-private-key-file must be given together")
        return self
