"""Object keys (``namespace/name``, or ``name`` when cluster-scoped) and resourceVersion arithmetic.

Caches, work queues and log lines all name an object by this one string, as
client-go's ``MetaNamespaceKeyFunc`` does, so a key taken from a queue finds
the object in any informer's store.
"""

from __future__ import annotations

from typing import Any


def make_key(namespace: str | None, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


def key_of(obj: dict[str, Any]) -> str:
    """The cache key of an API object (a dict as the API sends it)."""
    metadata = obj.get("metadata") or {}
    name = metadata.get("name")
    if not name:
        raise ValueError(f"object of kind {obj.get('kind')!r} has no metadata.name")
    return make_key(metadata.get("namespace"), name)


def split_key(key: str) -> tuple[str | None, str]:
    """``"ns/name"`` -> ``("ns", "name")``; ``"name"`` -> ``(None, "name")``."""
    namespace, slash, name = key.partition("/")
    if not slash:
        return None, key
    if not namespace or not name or "/" in name:
        raise ValueError(f"unexpected key format: {key!r}")
    return namespace, name


def resource_version(obj: dict[str, Any] | None) -> int:
    """The object's resourceVersion as an int (an etcd revision); 0 when absent or not decimal."""
    value = ((obj or {}).get("metadata") or {}).get("resourceVersion")
    try:
        return int(value) if value is not None else 0
    except (TypeError, ValueError):
        return 0
