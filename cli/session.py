"""What every verb shares: the global options, the API client they imply, and naming objects as kubectl does."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from daemons.api import resources
from daemons.api.client import ApiClient
from daemons.api.errors import APIError, ConnectionFailed, MiniK8sError
from daemons.api.resources import Resource


class CLIError(MiniK8sError):
    """A mistake on the command line or in a manifest, printed as ``error: ...``."""


@dataclass
class GlobalOptions:
    kubeconfig: str | None = None
    context: str | None = None
    server: str | None = None
    token: str | None = None
    insecure: bool = False
    namespace: str | None = None
    all_namespaces: bool = False


class Session:
    """One invocation: options from the command line, a client made on first use, and whether any object failed."""

    def __init__(self) -> None:
        self.options = GlobalOptions()
        self.failed = False

    @cached_property
    def client(self) -> ApiClient:
        options = self.options
        return ApiClient.from_config(options.kubeconfig, context=options.context, server=options.server,
                                     token=options.token, insecure=options.insecure, user_agent="kubectl/minik8s")

    @property
    def namespace(self) -> str:
        """``-n`` if given, else the kubeconfig context's namespace."""
        return self.options.namespace or self.client.connection.namespace

    def namespace_of(self, resource: Resource, body: dict[str, Any]) -> str | None:
        """The namespace a manifest's object goes to, written into its metadata; refuses a clash with ``-n``."""
        if not resource.namespaced:
            return None
        metadata = body.setdefault("metadata", {})
        declared = metadata.get("namespace")
        if declared and self.options.namespace and declared != self.options.namespace:
            raise CLIError(f'the namespace from the provided object "{declared}" does not match the namespace '
                           f'"{self.options.namespace}". You must pass \'--namespace={declared}\' to perform '
                           "this operation.")
        metadata["namespace"] = declared or self.namespace
        return metadata["namespace"]

    @contextmanager
    def each_object(self, ignore_not_found: bool = False) -> Iterator[None]:
        """Report a server error for one object and go on with the next, as kubectl does; the exit code shows it.

        With ``ignore_not_found`` a missing object is no error: nothing is printed and the exit code stays 0.
        """
        try:
            yield
        except APIError as error:
            if ignore_not_found and error.code == 404:
                return
            print(error_text(error), file=sys.stderr)
            self.failed = True

    def close(self) -> None:
        if "client" in self.__dict__:
            self.client.close()


def resource_type(text: str) -> Resource:
    """The row a user means by ``pods``, ``po``, ``Pod``, ``deployments.apps`` ..."""
    row = resources.resolve(text)
    if row is None:
        raise CLIError(f'the server doesn\'t have a resource type "{text}"')
    return row


def kind_label(resource: Resource) -> str:
    """``pod``, ``deployment.apps``: how kubectl names a kind in its messages."""
    return f"{resource.singular}.{resource.group}" if resource.group else resource.singular


def object_ref(resource: Resource, name: str) -> str:
    """``pod/web``, ``deployment.apps/web``."""
    return f"{kind_label(resource)}/{name}"


def pod_name(text: str) -> str:
    """A pod named as ``web`` or ``pod/web`` (``po/``, ``pods/`` too), as ``logs`` and ``exec`` take it."""
    kind, _, name = text.rpartition("/")
    if kind and resource_type(kind).kind != "Pod":
        raise CLIError(f"{text}: only pods have logs and run commands")
    return name


def type_and_names(args: list[str]) -> list[tuple[Resource, list[str]]]:
    """Split ``TYPE[,TYPE] [NAME...]`` or ``TYPE/NAME [TYPE/NAME...]`` into (row, names); no names means all."""
    if not args:
        raise CLIError("you must specify the type of resource")
    if all("/" in arg for arg in args):
        groups: list[tuple[Resource, list[str]]] = []
        for arg in args:
            kind, _, name = arg.partition("/")
            if not name:
                raise CLIError(f"arguments in resource/name form must have a single resource and name: {arg!r}")
            row = resource_type(kind)
            if groups and groups[-1][0] == row:
                groups[-1][1].append(name)
            else:
                groups.append((row, [name]))
        return groups
    if any("/" in arg for arg in args):
        raise CLIError("there is no need to specify a resource type as a separate argument when passing "
                       "arguments in resource/name form (e.g. 'kubectl get resource/<resource_name>' instead of "
                       "'kubectl get resource resource/<resource_name>'")
    kinds, names = args[0], args[1:]
    rows = [row for kind in kinds.split(",") if kind for row in expand_category(kind)]
    if names and len(rows) > 1:
        raise CLIError("you may only specify a single resource type when naming objects")
    return [(row, list(names)) for row in rows]


def expand_category(text: str) -> list[Resource]:
    """``all`` stands for every row in that category; anything else is one type."""
    members = [row for row in resources.RESOURCES if text in row.categories]
    return members or [resource_type(text)]


def error_text(error: MiniK8sError) -> str:
    """The line(s) kubectl prints for an error."""
    if isinstance(error, ConnectionFailed):
        return str(error)
    if not isinstance(error, APIError):
        return f"error: {error}"
    details = error.details or {}
    if error.reason == "Invalid" and error.causes:
        head = f'The {details.get("kind") or "request"} "{details.get("name", "")}" is invalid'
        causes = [f"{cause['field']}: {cause['message']}" if cause.get("field") else cause.get("message", "")
                  for cause in error.causes]
        if len(causes) == 1:
            return f"{head}: {causes[0]}"
        return f"{head}: \n" + "\n".join(f"* {cause}" for cause in causes)
    if error.reason == "Unauthorized":
        return "error: You must be logged in to the server (Unauthorized)"
    return f"Error from server ({error.reason}): {error.message}"
