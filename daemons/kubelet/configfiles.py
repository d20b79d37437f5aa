"""ConfigMap and Secret data as a pod sees it: the objects a pod refers to, and the files of its volumes.

The kubelet reads every ConfigMap and Secret a pod names at each sync, so an
edit reaches the pod's volumes by the next periodic resync. A volume's files
are swapped as upstream does it: a new timestamped folder, then one atomic
``rename`` of the ``..data`` symlink onto it; each visible name is a symlink
``key -> ..data/key``, so a reader sees either all old or all new files.
Secret volumes live on a tmpfs, never on disk. The pure half (which objects,
which files with which modes) is apart from the half that writes.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger(__name__)

ConfigKind = Literal["ConfigMap", "Secret"]
ObjectRef = tuple[ConfigKind, str]  # (kind, name) in the pod's namespace
ConfigObjects = Mapping[ObjectRef, Mapping[str, bytes] | None]  # the data of each, None when it does not exist
Projection = dict[str, tuple[bytes, int]]  # relative path -> (content, mode)

DEFAULT_MODE = 0o644
DATA_LINK = "..data"
VOLUME_PLUGINS: dict[ConfigKind, str] = {"ConfigMap": "kubernetes.io~configmap", "Secret": "kubernetes.io~secret"}
_VOLUME_FIELDS: dict[str, ConfigKind] = {"configMap": "ConfigMap", "secret": "Secret"}


class MissingConfig(LookupError):
    """A ConfigMap, Secret or key that a pod needs is not there (yet); the message says which, as upstream."""


class BadPath(ValueError):
    """An ``items`` path that would leave the volume (absolute, or with ``..``): never written."""


# --- pure: what a pod refers to and what its volumes hold -----------------------------------------------


def volume_kind(volume: Mapping[str, Any]) -> tuple[ConfigKind, Mapping[str, Any]] | None:
    """The kind and source of a configMap or secret volume; None for any other volume."""
    for field, kind in _VOLUME_FIELDS.items():
        if volume.get(field) is not None:
            return kind, volume[field]
    return None


def source_name(kind: ConfigKind, source: Mapping[str, Any]) -> str:
    """The object a volume source or env reference names (``secretName`` for a secret volume)."""
    return str(source.get("secretName") if kind == "Secret" and "secretName" in source else source.get("name") or "")


def not_found(kind: ConfigKind, name: str) -> str:
    return f'{kind.lower()} "{name}" not found'


def all_containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def referenced_objects(pod: Mapping[str, Any]) -> set[ObjectRef]:
    """Every ConfigMap and Secret the pod's volumes, env and envFrom name."""
    refs: set[ObjectRef] = set()
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        found = volume_kind(volume)
        if found is not None:
            refs.add((found[0], source_name(*found)))
    for container in all_containers(pod):
        for variable in container.get("env") or []:
            source = variable.get("valueFrom") or {}
            if source.get("configMapKeyRef"):
                refs.add(("ConfigMap", source["configMapKeyRef"].get("name", "")))
            if source.get("secretKeyRef"):
                refs.add(("Secret", source["secretKeyRef"].get("name", "")))
        for source in container.get("envFrom") or []:
            if source.get("configMapRef"):
                refs.add(("ConfigMap", source["configMapRef"].get("name", "")))
            if source.get("secretRef"):
                refs.add(("Secret", source["secretRef"].get("name", "")))
    return refs


def object_data(kind: ConfigKind, obj: Mapping[str, Any]) -> dict[str, bytes]:
    """A ConfigMap's ``data`` and ``binaryData``, or a Secret's decoded ``data`` (plus any ``stringData``)."""
    result: dict[str, bytes] = {}
    if kind == "ConfigMap":
        result.update({key: str(value).encode() for key, value in (obj.get("data") or {}).items()})
        encoded = obj.get("binaryData") or {}
    else:
        encoded = obj.get("data") or {}
    for key, value in encoded.items():
        try:
            result[key] = base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            result[key] = str(value).encode()
    if kind == "Secret":
        result.update({key: str(value).encode() for key, value in (obj.get("stringData") or {}).items()})
    return result


def projection(kind: ConfigKind, source: Mapping[str, Any], data: Mapping[str, bytes] | None) -> Projection:
    """The files of a configMap or secret volume: every key, or just ``items`` (key -> path, own mode).

    An optional source whose object or key is missing projects what there is;
    otherwise ``MissingConfig`` says what is missing, in upstream's words.
    """
    optional = bool(source.get("optional"))
    default_mode = source.get("defaultMode")
    default_mode = DEFAULT_MODE if default_mode is None else int(default_mode)
    if data is None:
        if optional:
            return {}
        raise MissingConfig(not_found(kind, source_name(kind, source)))
    items = source.get("items")
    if not items:
        return {_safe(key): (value, default_mode) for key, value in data.items()}
    files: Projection = {}
    for item in items:
        key = item["key"]
        if key not in data:
            if optional:
                continue
            what = "config key" if kind == "ConfigMap" else "secret key"
            raise MissingConfig(f"{kind.lower()} references non-existent {what}: {key}")
        mode = item.get("mode")
        files[_safe(str(item.get("path") or key))] = (data[key], default_mode if mode is None else int(mode))
    return files


def _safe(path: str) -> str:
    """``path`` itself when it stays inside the volume and clear of the ``..data`` names; else ``BadPath``."""
    if not path or os.path.isabs(path) or ".." in path.split("/") or path.startswith(".."):
        raise BadPath(f'path "{path}" must be relative, must not contain \'..\' and must not start with \'..\'')
    return path


def volume_dir(pod_dir: str, kind: ConfigKind, volume_name: str) -> str:
    """Where a pod's configMap or secret volume lives on the host, named as upstream names it."""
    return os.path.join(pod_dir, "volumes", VOLUME_PLUGINS[kind], volume_name)


# --- I/O: the atomic swap -------------------------------------------------------------------------------


def current_projection(target: str) -> Projection | None:
    """What the volume's ``..data`` holds now; None when it was never written."""
    data = Path(target, DATA_LINK)
    if not data.is_symlink():
        return None
    files: Projection = {}
    root = data.resolve()
    for path in root.rglob("*"):
        if path.is_file():
            files[str(path.relative_to(root))] = (path.read_bytes(), path.stat().st_mode & 0o7777)
    return files


def write_projection(target: str, files: Projection, now: datetime) -> bool:
    """Make ``target`` show ``files``; True when it changed. Readers never see a half-written set."""
    os.makedirs(target, exist_ok=True)
    if current_projection(target) == files:
        return False
    link = os.path.join(target, DATA_LINK)
    old = os.path.realpath(link) if os.path.islink(link) else None
    fresh = tempfile.mkdtemp(prefix=now.strftime("..%Y_%m_%d_%H_%M_%S."), dir=target)
    for relative, (content, mode) in files.items():
        path = os.path.join(fresh, relative)
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(content)
        os.chmod(path, mode)
    os.chmod(fresh, 0o755)
    visible = {relative.split(os.sep, 1)[0] for relative in files}
    for name in visible:
        entry = os.path.join(target, name)
        if not os.path.lexists(entry):
            os.symlink(os.path.join(DATA_LINK, name), entry)
    staged = os.path.join(target, DATA_LINK + "_tmp")
    if os.path.lexists(staged):
        os.unlink(staged)
    os.symlink(os.path.basename(fresh), staged)
    os.rename(staged, link)
    for entry in os.listdir(target):
        if not entry.startswith("..") and entry not in visible:
            os.unlink(os.path.join(target, entry))
    if old is not None and os.path.dirname(old) == os.path.realpath(target):
        shutil.rmtree(old, ignore_errors=True)
    return True


def ensure_tmpfs(target: str) -> None:
    """Mount a tmpfs on ``target`` (a secret volume) unless one is there; needs root, as upstream."""
    os.makedirs(target, exist_ok=True)
    if os.path.ismount(target):
        return
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", target], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise OSError(f"cannot mount a tmpfs on {target}: {done.stderr.strip() or done.returncode}")


def mounts_under(folder: str, mount_table: Iterable[str]) -> list[str]:
    """The mount points below ``folder`` in a ``/proc/mounts`` table, deepest first."""
    prefix = os.path.realpath(folder).rstrip("/") + "/"
    points = [line.split()[1] for line in mount_table if len(line.split()) > 1]
    return sorted((point for point in points if point.startswith(prefix)), key=len, reverse=True)


def unmount_under(folder: str) -> None:
    """Unmount the secret tmpfs volumes of a pod folder that is about to be removed."""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as table:
            points = mounts_under(folder, table)
    except OSError:
        return
    for point in points:
        done = subprocess.run(["umount", point], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            log.warning("cannot unmount %s: %s", point, done.stderr.strip())
