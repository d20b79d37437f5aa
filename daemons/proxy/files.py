"""Files and processes the proxy hands configuration to: atomic writes and a signal to the pid in a pid file."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


def read_text(path: Path) -> str | None:
    """The file's text; None when it does not exist yet."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Replace ``path`` with ``text`` in one rename, so a reader sees the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as temporary:
        temporary.write(text)
    try:
        os.chmod(temporary.name, mode)
        os.replace(temporary.name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary.name)
        raise


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
