"""Reading kubeconfig files: the current context's server, credentials, CA and namespace."""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from daemons.api.errors import MiniK8sError


class KubeconfigError(MiniK8sError):
    """The kubeconfig is missing, unreadable or names something it does not define."""


@dataclass(frozen=True)
class Connection:
    """Everything needed to reach one apiserver as one user."""

    server: str
    token: str | None = None
    ca_file: str | None = None
    insecure: bool = False
    namespace: str = "default"
    client_cert: str | None = None
    client_key: str | None = None

    @property
    def verify(self) -> ssl.SSLContext | bool:
        """What httpx should verify the server against: the cluster CA, the system store, or nothing."""
        if self.insecure:
            return False
        context = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else ssl.create_default_context()
        if self.client_cert:
            context.load_cert_chain(self.client_cert, self.client_key)
        return context


def default_path() -> Path:
    first = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
    return Path(first) if first else Path.home() / ".kube" / "config"


def _named(entries: list[dict[str, Any]] | None, name: str, what: str, path: Path) -> dict[str, Any]:
    for entry in entries or []:
        if entry.get("name") == name:
            return entry.get(what) or {}
    raise KubeconfigError(f"{path}: no {what} named {name!r}")


def _materialize(data: str, suffix: str) -> str:
    """Write inline ``*-data`` (base64) to a private file, since TLS libraries want paths."""
    with tempfile.NamedTemporaryFile(prefix="minik8s-", suffix=suffix, delete=False) as handle:
        handle.write(base64.b64decode(data))
    os.chmod(handle.name, 0o600)
    return handle.name


def load(path: Path | str | None = None, context: str | None = None) -> Connection:
    """The connection of ``context`` (default: current-context) in the kubeconfig at ``path``."""
    path = Path(path) if path else default_path()
    try:
        config = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise KubeconfigError(f"no kubeconfig at {path}: pass --kubeconfig or --server") from None
    except (OSError, yaml.YAMLError) as error:
        raise KubeconfigError(f"cannot read kubeconfig {path}: {error}") from None
    context_name = context or config.get("current-context")
    if not context_name:
        raise KubeconfigError(f"{path}: no current-context is set")
    ctx = _named(config.get("contexts"), context_name, "context", path)
    cluster = _named(config.get("clusters"), ctx.get("cluster", ""), "cluster", path)
    user = _named(config.get("users"), ctx["user"], "user", path) if ctx.get("user") else {}
    if not cluster.get("server"):
        raise KubeconfigError(f"{path}: cluster {ctx.get('cluster')!r} has no server")
    ca_file = cluster.get("certificate-authority")
    if cluster.get("certificate-authority-data"):
        ca_file = _materialize(cluster["certificate-authority-data"], ".crt")
    client_cert = user.get("client-certificate")
    if user.get("client-certificate-data"):
        client_cert = _materialize(user["client-certificate-data"], ".crt")
    client_key = user.get("client-key")
    if user.get("client-key-data"):
        client_key = _materialize(user["client-key-data"], ".key")
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = Path(user["tokenFile"]).read_text().strip()
    return Connection(
        server=cluster["server"].rstrip("/"),
        token=token,
        ca_file=ca_file,
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        namespace=ctx.get("namespace") or "default",
        client_cert=client_cert,
        client_key=client_key,
    )


def render(server: str, token: str, ca_file: str | None = None, name: str = "minik8s") -> str:
    """A kubeconfig with one cluster, user and context, as the installer writes for each component."""
    cluster: dict[str, Any] = {"server": server}
    if ca_file:
        cluster["certificate-authority"] = ca_file
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
    return yaml.safe_dump(config, sort_keys=False)
