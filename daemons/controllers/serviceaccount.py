"""The ServiceAccount controller: every active namespace has a ServiceAccount named ``default``.

As Kubernetes' serviceaccounts-controller: a namespace that appears, or whose ``default``
account is deleted, gets one created; a namespace being deleted gets none.
"""

from __future__ import annotations

import logging
from typing import Any

from daemons.api.errors import AlreadyExists, APIError, ConnectionFailed, NotFound
from daemons.api.kinds.serviceaccount import DEFAULT_NAME
from daemons.api.resources import require
from daemons.controllers.context import ControllerContext
from daemons.machinery.controller import Controller, TemporaryError
from daemons.machinery.keys import make_key

log = logging.getLogger(__name__)

Obj = dict[str, Any]

NAMESPACES = require("v1", "Namespace")
SERVICE_ACCOUNTS = require("v1", "ServiceAccount")
# The Status cause of a create refused because the namespace is being deleted.
NAMESPACE_TERMINATING = "NamespaceTerminating"


def is_active(namespace: Obj | None) -> bool:
    """The namespace exists and is not being deleted."""
    if namespace is None:
        return False
    return not (namespace.get("metadata") or {}).get("deletionTimestamp") \
        and (namespace.get("status") or {}).get("phase") != "Terminating"


def default_account(namespace: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": DEFAULT_NAME, "namespace": namespace}}


class ServiceAccountsController:
    """Creates the missing ``default`` ServiceAccounts, syncing namespace names."""

    name = "serviceaccount"

    def __init__(self, context: ControllerContext) -> None:
        self.client = context.client
        self.controller = Controller(self.name, self.sync, context.workers)
        self.namespaces = context.informers.informer(NAMESPACES)
        self.accounts = context.informers.informer(SERVICE_ACCOUNTS)
        self.namespaces.add_handlers(self._namespace_seen, lambda _old, new: self._namespace_seen(new))
        self.accounts.add_handlers(on_delete=self._account_deleted)

    def start(self) -> None:
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()

    def _namespace_seen(self, namespace: Obj) -> None:
        self.controller.enqueue((namespace.get("metadata") or {}).get("name") or "")

    def _account_deleted(self, account: Obj) -> None:
        metadata = account.get("metadata") or {}
        if metadata.get("name") == DEFAULT_NAME and metadata.get("namespace"):
            self.controller.enqueue(metadata["namespace"])

    def sync(self, key: str) -> None:
        """Create ``<key>/default`` if the namespace is active and the cache has no such account."""
        if not is_active(self.namespaces.store.get_by_key(key)):
            return
        if self.accounts.store.get_by_key(make_key(key, DEFAULT_NAME)) is not None:
            return
        try:
            self.client.create(SERVICE_ACCOUNTS, default_account(key), key)
        except AlreadyExists:
            return  # the cache has not caught up with it yet
        except NotFound:
            return  # the namespace went meanwhile
        except APIError as error:
            if any(cause.get("type") == NAMESPACE_TERMINATING for cause in error.causes):
                return
            raise TemporaryError(f"{key}/{DEFAULT_NAME}: creating the ServiceAccount failed: {error}") from error
        except ConnectionFailed as error:
            raise TemporaryError(f"{key}/{DEFAULT_NAME}: creating the ServiceAccount failed: {error}") from error
        log.info("%s/%s: created the namespace's default ServiceAccount", key, DEFAULT_NAME)
