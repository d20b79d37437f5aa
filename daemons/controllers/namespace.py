"""The namespace controller: empties a namespace being deleted, then finalizes it.

As Kubernetes' namespace controller: DELETE only marks a namespace Terminating (its row holds it while
``spec.finalizers`` names ``kubernetes``). For such a namespace this deletes every namespaced object of every
kind in it (pods get their grace period), and once nothing is left writes ``finalize`` without its finalizer,
which lets the apiserver remove the namespace. Objects that remain (a pod still stopping) requeue the namespace
with back-off.
"""

from __future__ import annotations

import logging
from typing import Any

from daemons.api.errors import APIError, ConnectionFailed, NotFound
from daemons.api.kinds.namespace import FINALIZER
from daemons.api.resources import RESOURCES, require
from daemons.controllers.context import ControllerContext
from daemons.machinery.controller import Controller, TemporaryError

log = logging.getLogger(__name__)

Obj = dict[str, Any]

NAMESPACES = require("v1", "Namespace")
# Back-off cap while objects remain: a pod's grace period (30s by default) should not cost minutes more.
MAX_RETRY_SECONDS = 5.0


def is_terminating(namespace: Obj | None) -> bool:
    """The namespace is being deleted and still holds this controller's finalizer."""
    if namespace is None or not (namespace.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return FINALIZER in ((namespace.get("spec") or {}).get("finalizers") or [])


def finalized(namespace: Obj) -> Obj:
    """The ``finalize`` body: the namespace without this controller's finalizer."""
    spec = dict(namespace.get("spec") or {})
    spec["finalizers"] = [name for name in spec.get("finalizers") or [] if name != FINALIZER]
    return {**namespace, "spec": spec}


class NamespaceController:
    """Deletes the content of Terminating namespaces, syncing namespace names."""

    name = "namespace"

    def __init__(self, context: ControllerContext) -> None:
        self.client = context.client
        self.controller = Controller(self.name, self.sync, context.workers, max_delay=MAX_RETRY_SECONDS)
        self.namespaces = context.informers.informer(NAMESPACES)
        self.namespaces.add_handlers(self.controller.enqueue_object,
                                     lambda _old, new: self.controller.enqueue_object(new))

    def start(self) -> None:
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()

    def sync(self, key: str) -> None:
        namespace = self.namespaces.store.get_by_key(key)
        if not is_terminating(namespace):
            return
        assert namespace is not None
        try:
            remaining = self._delete_content(key)
            if remaining:
                raise TemporaryError(f"{key}: {remaining} object(s) still in the namespace")
            self.client.replace(NAMESPACES, finalized(namespace), subresource="finalize")
        except NotFound:
            return  # the namespace is gone already
        except (APIError, ConnectionFailed) as error:
            raise TemporaryError(f"{key}: emptying the namespace failed: {error}") from error
        log.info("%s: namespace emptied and finalized", key)

    def _delete_content(self, namespace: str) -> int:
        """Issue a DELETE for every object in ``namespace`` not yet being deleted; how many objects remain."""
        remaining = 0
        for resource in RESOURCES:
            if not resource.namespaced:
                continue
            for item in self.client.list(resource, namespace).get("items") or []:
                remaining += 1
                metadata = item.get("metadata") or {}
                if metadata.get("deletionTimestamp"):
                    continue
                try:
                    self.client.delete(resource, metadata["name"], namespace)
                except NotFound:
                    continue
                log.debug("%s/%s: deleted %s with its namespace", namespace, metadata["name"], resource.kind)
        return remaining
