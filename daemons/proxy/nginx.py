"""nginx on the node forwards each DNS host's paths to their Services' ClusterIPs.

The proxy renders nginx's whole main configuration from ``templates/nginx.conf.j2``
and hands it over only once ``nginx -t`` accepts it: written beside the live
file as ``<path>.new``, tested, renamed onto the live file, then nginx is told to
reload (SIGHUP). A configuration nginx rejects (a broken operator snippet, say)
never replaces the one it runs: the sync fails and is retried with back-off,
while nginx keeps serving the last good routes.
"""

from __future__ import annotations

import functools
import importlib.resources
import logging
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import jinja2
from prometheus_client import Counter

from daemons.api.files import write_atomic
from daemons.proxy.files import read_text, signal_pid_file
from daemons.proxy.names import ClusterView, VirtualHost

log = logging.getLogger(__name__)

TEMPLATE = "nginx.conf.j2"
TEST_TIMEOUT_SECONDS = 30.0

RELOADS = Counter("minik8s_proxy_nginx_reloads_total", "nginx configurations handed over (reloaded: nginx was "
                  "signalled; written: no nginx ran to signal) or rejected by nginx -t", ["result"])


class NginxConfigError(RuntimeError):
    """nginx -t rejected the rendered configuration; the running one stays."""


@functools.cache
def _template() -> jinja2.Template:
    source = (importlib.resources.files("templates") / TEMPLATE).read_text()
    environment = jinja2.Environment(autoescape=False, undefined=jinja2.StrictUndefined, trim_blocks=True,
                                     lstrip_blocks=True, keep_trailing_newline=True)
    return environment.from_string(source)


def render_nginx(hosts: Sequence[VirtualHost], *, listen: str, pid_file: str, snippets_dir: str) -> str:
    """nginx's main configuration: a 404 default server on ``listen`` and one server per virtual host."""
    return _template().render(virtual_hosts=hosts, listen=listen, pid_file=pid_file,
                              snippets_dir=snippets_dir.rstrip("/") or "/")


class NginxProgrammer:
    """Keeps ``config`` rendered from the virtual hosts and the nginx behind ``pid_file`` reloaded."""

    name = "nginx"

    def __init__(self, config: Path, pid_file: Path, snippets_dir: Path, listen: str, binary: str = "nginx") -> None:
        self.config = config
        self.candidate = config.with_name(config.name + ".new")
        self.pid_file = pid_file
        self.snippets_dir = snippets_dir
        self.listen = listen
        self.binary = binary

    def sync(self, view: ClusterView) -> None:
        text = render_nginx(view.hosts, listen=self.listen, pid_file=str(self.pid_file),
                            snippets_dir=str(self.snippets_dir))
        if read_text(self.config) == text:
            return
        self.config.parent.mkdir(parents=True, exist_ok=True)
        # nginx -t opens the pid file too: its directory (under /run, empty after a reboot) must exist first.
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.candidate, text)
        result = subprocess.run([self.binary, "-t", "-q", "-c", str(self.candidate)], capture_output=True, text=True,
                                timeout=TEST_TIMEOUT_SECONDS, check=False)
        if result.returncode != 0:
            RELOADS.labels("rejected").inc()
            problem = (result.stderr or result.stdout).strip() or f"exit status {result.returncode}"
            log.error("nginx: %s rejected by nginx -t, %s stays as it is: %s", self.candidate, self.config, problem)
            raise NginxConfigError(f"nginx -t rejected {self.candidate}: {problem}")
        os.replace(self.candidate, self.config)
        reloaded = signal_pid_file(self.pid_file)
        RELOADS.labels("reloaded" if reloaded else "written").inc()
        log.info("nginx: %s written with %d hosts%s", self.config, len(view.hosts),
                 ", nginx reloaded" if reloaded else "; nginx is not running and reads it when it starts")

    def cleanup(self) -> None:
        """The configuration stays: nginx keeps running from it until the node is reset (playbooks/reset.yml)."""
        log.info("nginx: %s left in place", self.config)
