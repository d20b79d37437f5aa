"""The kubelet's HTTPS API, which the apiserver proxies ``pods/log`` and ``pods/exec`` to.

- ``GET /healthz`` answers anyone.
- ``GET /containerLogs/{namespace}/{pod}/{container}?tailLines=N&follow=true&timestamps=true&previous=true``
  answers text/plain, streamed until the container stops when ``follow``.
- ``POST /run/{namespace}/{pod}/{container}`` with ``{"command": [...]}`` answers
  ``{"exitCode", "stdout", "stderr"}``.
- ``GET /metrics/cadvisor``: the pods' containers' CPU, memory and network in cAdvisor's format
  (daemons.kubelet.cadvisor); ``GET /metrics``: the kubelet's own process metrics.

Everything but /healthz needs a bearer token from ``--authentication-token-file``.
Errors are Kubernetes ``Status`` objects. Threads serve requests, so a followed
log does not hold up anyone else.
"""

from __future__ import annotations

import hmac
import json
import logging
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import docker.errors
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from daemons.kubelet.runtime import DOCKER_ERRORS, DockerRuntime

log = logging.getLogger(__name__)

# (namespace, pod, container, previous) -> container id; LookupError says what is missing.
Locator = Callable[[str, str, str, bool], str]
# The text exposition of the containers' metrics, made anew for each scrape.
Scraper = Callable[[], bytes]


class NotOnNode(LookupError):
    """The pod or container is not on this node (404)."""


class NoPrevious(LookupError):
    """``previous=true`` but the container has not restarted (400)."""


@dataclass(frozen=True)
class Route:
    action: str  # healthz | logs | run | metrics | cadvisor
    namespace: str = ""
    pod: str = ""
    container: str = ""


def parse_route(method: str, path: str) -> Route | None:
    """Which endpoint a request is for; None for anything else (404, or 405 for a known path)."""
    parts = [unquote(part) for part in urlsplit(path).path.split("/") if part]
    if parts == ["healthz"] and method == "GET":
        return Route("healthz")
    if parts == ["metrics"] and method == "GET":
        return Route("metrics")
    if parts == ["metrics", "cadvisor"] and method == "GET":
        return Route("cadvisor")
    if len(parts) == 4 and all(parts):
        if parts[0] == "containerLogs" and method == "GET":
            return Route("logs", *parts[1:])
        if parts[0] == "run" and method == "POST":
            return Route("run", *parts[1:])
    return None


def load_tokens(path: str | Path | None) -> frozenset[str]:
    """Accepted bearer tokens: one per line; a static token file's CSV lines count by their first field."""
    if not path:
        return frozenset()
    tokens = set()
    for line in Path(path).read_text().splitlines():
        token = line.split(",", 1)[0].strip()
        if token and not token.startswith("#"):
            tokens.add(token)
    return frozenset(tokens)


def authorized(header: str | None, tokens: frozenset[str]) -> bool:
    scheme, _, token = (header or "").partition(" ")
    token = token.strip()
    return scheme.lower() == "bearer" and bool(token) and any(hmac.compare_digest(token, known) for known in tokens)


def flag(query: dict[str, list[str]], name: str) -> bool:
    return (query.get(name) or ["false"])[-1].lower() in ("true", "1", "yes")


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def ensure_certificate(directory: Path, node_name: str, addresses: list[str]) -> tuple[Path, Path]:
    """A self-signed certificate for the node's name and addresses, made once with openssl."""
    cert, key = directory / "kubelet.crt", directory / "kubelet.key"
    if cert.exists() and key.exists():
        return cert, key
    directory.mkdir(parents=True, exist_ok=True)
    names = [f"DNS:{name}" for name in dict.fromkeys([node_name, socket.gethostname(), "localhost"])]
    names += [f"IP:{address}" for address in dict.fromkeys([*addresses, "127.0.0.1"])]
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "3650",
                    "-keyout", str(key), "-out", str(cert), "-subj", f"/CN={node_name}",
                    "-addext", f"subjectAltName={','.join(names)}"], check=True, capture_output=True)
    key.chmod(0o600)
    log.info("generated a self-signed certificate %s", cert)
    return cert, key


class KubeletServer:
    """The HTTPS API on its own threads."""

    def __init__(self, runtime: DockerRuntime, locate: Locator, tokens: frozenset[str], host: str, port: int,
                 cert_file: str | Path, key_file: str | Path, cadvisor: Scraper) -> None:
        self.runtime = runtime
        self.locate = locate
        self.cadvisor = cadvisor
        self.tokens = tokens
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert_file), str(key_file))
        self.httpd = ThreadingHTTPServer((host, port), self._handler_class())
        self.httpd.daemon_threads = True
        # The handshake happens on the request's own thread, so a slow client cannot stall accept().
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True, do_handshake_on_connect=False)
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="kubelet-api", daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> None:
        self._thread.start()
        log.info("serving the kubelet API on https://%s:%d", self.httpd.server_address[0], self.port)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # --- endpoints ----------------------------------------------------------------------------------

    def logs(self, route: Route, query: dict[str, list[str]]) -> tuple[bool, Iterator[bytes]]:
        """Whether the answer streams, and its chunks."""
        container_id = self.locate(route.namespace, route.pod, route.container, flag(query, "previous"))
        tail = (query.get("tailLines") or [None])[-1]
        since_seconds = (query.get("sinceSeconds") or [None])[-1]
        since = datetime.now(UTC) - timedelta(seconds=int(since_seconds)) if since_seconds else None
        options = {"tail": int(tail) if tail is not None else None, "timestamps": flag(query, "timestamps"),
                   "since": since}
        if flag(query, "follow"):
            return True, self.runtime.follow_logs(container_id, **options)
        return False, iter([self.runtime.logs(container_id, **options)])

    def run(self, route: Route, body: bytes) -> dict[str, Any]:
        try:
            command = json.loads(body or b"{}").get("command")
        except (ValueError, AttributeError):
            command = None
        if not isinstance(command, list) or not command or not all(isinstance(part, str) for part in command):
            raise ValueError('the body must be {"command": ["program", "arg", ...]}')
        container_id = self.locate(route.namespace, route.pod, route.container, False)
        code, stdout, stderr = self.runtime.exec(container_id, command)
        return {"exitCode": code, "stdout": stdout.decode(errors="replace"), "stderr": stderr.decode(errors="replace")}

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "minik8s-kubelet"

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("%s %s", self.address_string(), format % args)

            def do_GET(self) -> None:
                self._dispatch()

            def do_POST(self) -> None:
                self._dispatch()

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _json(self, code: int, body: dict[str, Any]) -> None:
                self._send(code, json.dumps(body).encode(), "application/json")

            def _fail(self, code: int, reason: str, message: str) -> None:
                self._json(code, status_body(code, reason, message))

            def _dispatch(self) -> None:
                route = parse_route(self.command, self.path)
                if route is not None and route.action == "healthz":
                    self._send(200, b"ok", "text/plain; charset=utf-8")
                    return
                if not authorized(self.headers.get("Authorization"), server.tokens):
                    self._fail(401, "Unauthorized", "Unauthorized")
                    return
                if route is None:
                    self._fail(404, "NotFound", f"no endpoint {self.command} {urlsplit(self.path).path}")
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                try:
                    if route.action == "metrics":
                        self._send(200, generate_latest(), CONTENT_TYPE_LATEST)
                    elif route.action == "cadvisor":
                        self._send(200, server.cadvisor(), CONTENT_TYPE_LATEST)
                    elif route.action == "run":
                        self._json(200, server.run(route, body))
                    else:
                        self._logs(route)
                except NotOnNode as error:
                    self._fail(404, "NotFound", str(error))
                except (NoPrevious, ValueError) as error:
                    self._fail(400, "BadRequest", str(error))
                except DOCKER_ERRORS as error:
                    self._runtime_failed(route, error)

            def _runtime_failed(self, route: Route, error: Exception) -> None:
                where = f'container "{route.container}" in pod "{route.pod}"'
                if isinstance(error, docker.errors.NotFound):
                    self._fail(404, "NotFound", f"{where} is gone")
                elif isinstance(error, docker.errors.APIError) and error.status_code == 409:
                    self._fail(409, "Conflict", f"{where} is not running")
                else:
                    log.warning("%s/%s: %s in container %s failed: %s", route.namespace, route.pod, route.action,
                                route.container, error)
                    self._fail(500, "InternalError", f"container runtime: {error}")

            def _logs(self, route: Route) -> None:
                follow, chunks = server.logs(route, parse_qs(urlsplit(self.path).query))
                if not follow:
                    self._send(200, b"".join(chunks), "text/plain; charset=utf-8")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    for chunk in chunks:
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                    pass  # the client stopped following
                finally:
                    close = getattr(chunks, "close", None)
                    if close is not None:
                        close()
                self.close_connection = True

        return Handler
