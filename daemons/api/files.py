"""Writing files that other programs read (nginx, dnsmasq, Prometheus, CNI): whole or not at all."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    """Replace ``path`` by ``data`` with one rename of a synced temporary file in the same directory, so a reader
    sees the old file or the new one, never half, even after a crash."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_if_changed(path: Path, data: str | bytes, mode: int = 0o644) -> bool:
    """``write_atomic`` unless ``path`` holds ``data`` already (no needless reload of its reader); whether it wrote."""
    wanted = data.encode() if isinstance(data, str) else data
    try:
        if path.read_bytes() == wanted:
            return False
    except FileNotFoundError:
        pass
    write_atomic(path, wanted, mode)
    return True
