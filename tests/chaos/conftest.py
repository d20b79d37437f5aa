"""Fault injection against the installed cluster: SIGKILL its supervisord programs and watch it come back.

Every daemon, etcd and RabbitMQ run as supervisord programs with autorestart, so killing one is a crash that
supervisord repairs; the tests only ever kill, never stop or start anything themselves.
"""

from __future__ import annotations

import collections
import http.client
import os
import signal
import socket
import time
import xmlrpc.client
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import cluster  # noqa: F401  (the installed cluster's admin client, for these tests too)

SUPERVISOR_SOCKET = "/var/run/supervisor.sock"
BROKER = "rabbitmq-server"
# RabbitMQ's program is a shell script waiting on the Erlang VM: the VM is what crashes.
ERLANG_VM = "beam.smp"


@dataclass
class FaultFigures:
    """What one fault cost: requests during its window, how long supervisord and the cluster took."""

    fault: str
    served: int = 0
    failed: int = 0
    restart_s: float | None = None
    converge_s: float | None = None
    objects_checked: int = 0
    max_active: dict[str, int] = field(default_factory=dict)
    api_answers: collections.Counter[str] = field(default_factory=collections.Counter)
    api_slowest_s: float = 0.0
    verdict: str = "incomplete"


FIGURES: list[FaultFigures] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print one row per fault, so CI's output shows what every crash cost."""
    if not FIGURES:
        return
    terminalreporter.section("chaos: per fault")
    terminalreporter.write_line("Service requests from the host and API reads during each fault window (from the kill "
                                "to convergence); restart: kill to RUNNING again; converge: RUNNING to every "
                                "invariant holding and a new pod Running; max active pods: all ReplicaSets of "
                                "the Deployment together (limit replicas + maxSurge)")
    terminalreporter.write_line(f"{'fault':<20} {'served':>6} {'failed':>6} {'restart_s':>9} {'converge_s':>10} "
                                f"{'objects':>7}  {'max active pods':<22} {'API answers':<30} {'slowest':>7}  verdict")
    for row in FIGURES:
        restart = f"{row.restart_s:.1f}" if row.restart_s is not None else "-"
        converge = f"{row.converge_s:.1f}" if row.converge_s is not None else "-"
        active = " ".join(f"{name}={count}" for name, count in sorted(row.max_active.items()))
        answers = " ".join(f"{answer}:{count}" for answer, count in sorted(row.api_answers.items()))
        terminalreporter.write_line(f"{row.fault:<20} {row.served:>6} {row.failed:>6} {restart:>9} {converge:>10} "
                                    f"{row.objects_checked:>7}  {active:<22} {answers:<30} "
                                    f"{row.api_slowest_s:>6.1f}s  {row.verdict}")


class _UnixConnection(http.client.HTTPConnection):
    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(SUPERVISOR_SOCKET)


class _UnixTransport(xmlrpc.client.Transport):
    def make_connection(self, host: Any) -> http.client.HTTPConnection:
        return _UnixConnection("localhost")


def program_pids() -> dict[str, int]:
    """The pid supervisord holds for every program that is RUNNING (0 for the others), over its XML-RPC socket.

    One call answers for all programs at once and costs milliseconds, where ``supervisorctl`` costs a Python
    start-up per program on a machine busy restarting daemons.
    """
    proxy = xmlrpc.client.ServerProxy("http://localhost", transport=_UnixTransport())
    infos: list[dict[str, Any]] = proxy.supervisor.getAllProcessInfo()  # type: ignore[assignment]
    return {info["name"]: info["pid"] if info["statename"] == "RUNNING" else 0 for info in infos}


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def _command_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except FileNotFoundError:
        return ""


def crash_target(program: str, pid: int) -> int:
    """The process whose SIGKILL is ``program``'s crash: the Erlang VM for the broker, the program itself else."""
    if program != BROKER:
        return pid
    pending = [pid]
    while pending:
        current = pending.pop()
        if _command_name(current) == ERLANG_VM:
            return current
        pending.extend(_children(current))
    raise AssertionError(f"{program} (pid {pid}) runs no {ERLANG_VM}")


def kill_programs(programs: tuple[str, ...]) -> dict[str, int]:
    """SIGKILL every program in ``programs`` at once; the pid supervisord held for each."""
    running = program_pids()
    pids = {program: running.get(program, 0) for program in programs}
    missing = [program for program, pid in pids.items() if not pid]
    assert not missing, f"not RUNNING before the fault: {missing}"
    targets = [crash_target(program, pid) for program, pid in pids.items()]
    for target in targets:
        os.kill(target, signal.SIGKILL)
    return pids


def wait_restarted(old_pids: dict[str, int], timeout: float = 60) -> float:
    """Wait until supervisord runs every program again under a new pid; the monotonic time the last one was up."""
    deadline = time.monotonic() + timeout
    waiting = dict(old_pids)
    last_up = time.monotonic()
    while waiting:
        running = program_pids()
        for program, old in list(waiting.items()):
            pid = running.get(program, 0)
            if pid and pid != old:
                last_up = time.monotonic()
                del waiting[program]
        if waiting and time.monotonic() > deadline:
            raise AssertionError(f"supervisord did not restart {sorted(waiting)} within {timeout:.0f} s")
        if waiting:
            time.sleep(0.1)
    return last_up
