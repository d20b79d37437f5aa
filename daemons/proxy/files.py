"""Files and processes the proxy hands configuration to: reading a file that may not exist yet, and a signal to
the pid in a pid file (writes go through daemons.api.files)."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

log = logging.getLogger(__name__)


def read_text(path: Path) -> str | None:
    """The file's text; None when it does not exist yet."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def signal_pid_file(pid_file: Path, signum: signal.Signals = signal.SIGHUP) -> bool:
    """Send ``signum`` to the process whose pid ``pid_file`` holds; False when there is no such process (not
    started yet: it reads its configuration when it starts)."""
    try:
        text = pid_file.read_text().strip()
    except FileNotFoundError:
        return False
    if not text:  # nginx -t creates the file empty before nginx itself ever ran
        return False
    if not text.isdigit():
        log.warning("%s holds no pid (%r); no process to signal", pid_file, text[:40])
        return False
    pid = int(text)
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    return True
