#!/usr/bin/python3
"""Stop the programs a supervisord that was killed left running, before a new supervisord starts them again.

supervisord starts each program as the leader of its own process group. When supervisord itself dies
(SIGKILL, OOM, the end of a container's session), those groups live on under PID 1: a second copy of a
program then cannot bind its ports (RabbitMQ's distribution port, the apiserver's 6443, nginx's 80), keeps
failing, and the old copy goes on serving with whatever code and configuration it started with.

Usage: stop-orphaned-programs.py SUPERVISORD_CONF. Run only while no supervisord runs. Prints how many
process groups it stopped.
"""

from __future__ import annotations

import configparser
import glob
import os
import shlex
import signal
import sys
import time

GRACE_SECONDS = 15
SHELLS = {"sh", "bash", "dash"}


def program_paths(config_file: str) -> set[str]:
    """The executables of every [program:x] in supervisord's configuration and the files it includes."""
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    parser.read(config_file)
    files = [config_file]
    if parser.has_option("include", "files"):
        base = os.path.dirname(config_file)
        for pattern in parser.get("include", "files").split():
            files.extend(sorted(glob.glob(os.path.join(base, pattern))))
    paths: set[str] = set()
    for name in files:
        programs = configparser.RawConfigParser(strict=False, interpolation=None)
        programs.read(name)
        for section in programs.sections():
            if section.startswith("program:") and programs.has_option(section, "command"):
                executable = program_executable(shlex.split(programs.get(section, "command")))
                if executable:
                    paths.add(os.path.realpath(executable))
    return paths


def program_executable(argv: list[str]) -> str | None:
    """What a program's command runs: for ``sh -c "... && exec X ..."`` that is X, not the shell."""
    if len(argv) >= 3 and os.path.basename(argv[0]) in SHELLS and argv[1] == "-c":
        _, found, rest = argv[2].rpartition("exec ")
        words = shlex.split(rest) if found else []
        return words[0] if words else None
    return argv[0] if argv else None


def orphaned_groups(paths: set[str]) -> list[int]:
    """Process-group leaders adopted by PID 1 that run one of ``paths`` (directly or as an interpreted script)."""
    groups = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            parent, group = int(fields[1]), int(fields[2])
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                argv = [part.decode(errors="replace") for part in cmdline.read().split(b"\0") if part]
            executable = os.path.realpath(f"/proc/{pid}/exe")
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or a kernel thread
        if parent != 1 or group != pid:
            continue
        candidates = {executable, *(os.path.realpath(arg) for arg in argv[:2] if arg.startswith("/"))}
        if candidates & paths:
            groups.append(pid)
    return groups


def alive(group: int) -> bool:
    """Whether a process of the group still runs; zombies do not count, as PID 1 may never reap them."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            return True
    return False


def main() -> int:
    groups = orphaned_groups(program_paths(sys.argv[1]))
    for group in groups:
        os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while any(alive(group) for group in groups) and time.monotonic() < deadline:
        time.sleep(0.2)
    for group in groups:
        if alive(group):
            os.killpg(group, signal.SIGKILL)
    print(f"stopped {len(groups)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
