"""The apiserver's settings: flags and ``MINIK8S_*`` environment variables."""

from __future__ import annotations

from pydantic import Field, model_validator

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

    kubelet_client_token_file: str | None = Field(
        None, description="file holding the bearer token presented to kubelets for pods/log and pods/exec"
    )
    kubelet_certificate_authority: str | None = Field(
        None, description="CA bundle to verify kubelets' serving certificates (unverified when absent)"
    )

    @model_validator(mode="after")
    def _tls_pair(self) -> ApiServerSettings:
        if bool(self.tls_cert_file) != bool(self.tls_private_key_file):
            raise ValueError("--tls-cert-file and --tls-private-key-file must be given together")
        return self
