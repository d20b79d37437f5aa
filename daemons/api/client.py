"""The HTTP client every daemon and the CLI use to talk to the apiserver."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx

from daemons.api import kubeconfig
from daemons.api.errors import APIError, ConnectionFailed
from daemons.api.resources import Resource, resolve

PatchType = Literal["merge", "json", "strategic", "apply"]
PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}
TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


class ApiClient:
    """A thin, typed wrapper over the REST API: one method per verb, errors as ``APIError`` subclasses."""

    def __init__(self, connection: kubeconfig.Connection, timeout: float = 30.0, user_agent: str = "minik8s") -> None:
        self.connection = connection
        headers = {"User-Agent": user_agent, "Accept": "application/json"}
        if connection.token:
            headers["Authorization"] = f"Bearer {connection.token}"
        self._http = httpx.Client(base_url=connection.server, headers=headers, verify=connection.verify,
                                  timeout=timeout)

    @classmethod
    def from_config(
        cls,
        path: Path | str | None = None,
        *,
        context: str | None = None,
        server: str | None = None,
        token: str | None = None,
        insecure: bool = False,
        user_agent: str = "minik8s",
    ) -> ApiClient:
        """A client from a kubeconfig, with ``server``/``token`` overriding it or standing alone."""
        if server and not path and not kubeconfig.default_path().exists():
            connection = kubeconfig.Connection(server=server.rstrip("/"), token=token, insecure=insecure)
        else:
            connection = kubeconfig.load(path, context)
            overrides: dict[str, Any] = {}
            if server:
                overrides["server"] = server.rstrip("/")
            if token:
                overrides["token"] = token
            if insecure:
                overrides["insecure"] = True
            if overrides:
                connection = kubeconfig.Connection(**{**connection.__dict__, **overrides})
        return cls(connection, user_agent=user_agent)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing -----------------------------------------------------------------------------------

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.ConnectError as error:
            raise self._connect_error(error) from None
        except httpx.TransportError as error:
            raise ConnectionFailed(f"Unable to reach the server {self.connection.server}: {error}") from None
        if response.status_code >= 400:
            raise_for_status(response)
        return response

    def _connect_error(self, error: httpx.ConnectError) -> ConnectionFailed:
        """kubectl's wording: a refused connection names the server; a TLS failure says it is one."""
        if "CERTIFICATE" in str(error) or "SSL" in str(error):
            return ConnectionFailed(f"Unable to connect to the server {self.connection.server}: tls: {error}")
        return ConnectionFailed(f"The connection to the server {self.connection.server} was refused - "
                                "did you specify the right host or port?")

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """Send one request and return its JSON body; an error status raises its ``APIError``."""
        return self._send(method, path, **kwargs).json()

    # --- verbs --------------------------------------------------------------------------------------

    def create(self, resource: Resource, body: dict[str, Any], namespace: str | None = None,
               params: dict[str, Any] | None = None) -> dict[str, Any]:
        namespace = namespace or body.get("metadata", {}).get("namespace") or self.connection.namespace
        return self.request("POST", resource.path(namespace), json=body, params=params)

    def get(self, resource: Resource, name: str, namespace: str | None = None,
            subresource: str | None = None, resource_version: str | None = None) -> dict[str, Any]:
        """GET one object; ``resource_version="0"`` accepts the apiserver's cached copy (no etcd read)."""
        params = {"resourceVersion": resource_version} if resource_version is not None else None
        return self.request("GET", resource.path(namespace or self.connection.namespace, name, subresource),
                            params=params)

    def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        all_namespaces: bool = False,
        table: bool = False,
    ) -> dict[str, Any]:
        """LIST a collection; ``table=True`` asks for the server-rendered ``Table``."""
        params = {key: value for key, value in
                  (("labelSelector", label_selector), ("fieldSelector", field_selector)) if value}
        path = resource.path(None if all_namespaces else (namespace or self.connection.namespace))
        headers = {"Accept": TABLE_ACCEPT} if table else None
        return self.request("GET", path, params=params, headers=headers)

    def replace(self, resource: Resource, body: dict[str, Any], namespace: str | None = None,
                subresource: str | None = None) -> dict[str, Any]:
        metadata = body.get("metadata", {})
        namespace = namespace or metadata.get("namespace") or self.connection.namespace
        return self.request("PUT", resource.path(namespace, metadata["name"], subresource), json=body)

    def update_status(self, resource: Resource, body: dict[str, Any]) -> dict[str, Any]:
        return self.replace(resource, body, subresource="status")

    def patch(
        self,
        resource: Resource,
        name: str,
        patch: dict[str, Any] | list[Any],
        namespace: str | None = None,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool | None = None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if field_manager:
            params["fieldManager"] = field_manager
        if force is not None:
            params["force"] = "true" if force else "false"
        return self.request(
            "PATCH",
            resource.path(namespace or self.connection.namespace, name, subresource),
            content=json.dumps(patch),
            headers={"Content-Type": PATCH_CONTENT_TYPES[patch_type]},
            params=params,
        )

    def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
    ) -> dict[str, Any]:
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        return self.request("DELETE", resource.path(namespace or self.connection.namespace, name), json=options)

    def delete_collection(self, resource: Resource, namespace: str | None = None,
                          label_selector: str | None = None) -> dict[str, Any]:
        params = {"labelSelector": label_selector} if label_selector else None
        return self.request("DELETE", resource.path(namespace or self.connection.namespace), params=params)

    def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        all_namespaces: bool = False,
        timeout_seconds: int | None = None,
        table: bool = False,
    ) -> Iterator[dict[str, Any]]:
        """Yield watch events (``{"type", "object"}``) until the server ends the stream."""
        params: dict[str, Any] = {"watch": "true"}
        for key, value in (("resourceVersion", resource_version), ("labelSelector", label_selector),
                           ("fieldSelector", field_selector), ("timeoutSeconds", timeout_seconds)):
            if value is not None:
                params[key] = value
        path = resource.path(None if all_namespaces else (namespace or self.connection.namespace))
        headers = {"Accept": TABLE_ACCEPT} if table else None
        with self._stream(path, params, headers) as response:
            for line in response.iter_lines():
                if line.strip():
                    yield json.loads(line)

    def logs(self, name: str, namespace: str | None = None, container: str | None = None,
             tail_lines: int | None = None, follow: bool = False, previous: bool = False) -> Iterator[bytes]:
        """A pod container's log, as the kubelet streams it through ``pods/<name>/log``."""
        params: dict[str, Any] = {"follow": "true" if follow else "false"}
        if container:
            params["container"] = container
        if tail_lines is not None:
            params["tailLines"] = tail_lines
        if previous:
            params["previous"] = "true"
        with self._stream(_pods().path(namespace or self.connection.namespace, name, "log"), params) as response:
            yield from response.iter_bytes()

    def exec(self, name: str, command: list[str], namespace: str | None = None,
             container: str | None = None) -> dict[str, Any]:
        """Run ``command`` in a pod's container to completion: ``{"exitCode", "stdout", "stderr"}``."""
        body: dict[str, Any] = {"command": command}
        if container:
            body["container"] = container
        return self.request("POST", _pods().path(namespace or self.connection.namespace, name, "exec"), json=body)

    @contextlib.contextmanager
    def _stream(self, path: str, params: dict[str, Any],
                headers: dict[str, str] | None = None) -> Iterator[httpx.Response]:
        """A streamed GET whose error status raises before any of the body is read."""
        try:
            with self._http.stream("GET", path, params=params, headers=headers, timeout=None) as response:
                if response.status_code >= 400:
                    response.read()
                    raise_for_status(response)
                yield response
        except httpx.ConnectError as error:
            raise self._connect_error(error) from None


def _pods() -> Resource:
    pods = resolve("pods")
    assert pods is not None
    return pods


def raise_for_status(response: httpx.Response) -> None:
    """Raise the ``APIError`` subclass that the response's ``Status`` (or bare code) means."""
    try:
        body = response.json()
    except ValueError:
        body = None
    raise APIError.from_status(response.status_code, body, fallback=response.text.strip()[:500])
