"""``pods/log`` and ``pods/exec``: the apiserver forwards them to the kubelet running the pod.

The kubelet serves ``GET /containerLogs/<ns>/<pod>/<container>`` and
``POST /run/<ns>/<pod>/<container>`` over HTTPS and accepts the bearer token the
apiserver was given with ``--kubelet-client-token-file``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx

from daemons.api import errors
from daemons.api.resources import resolve
from daemons.apiserver.registry import Registry

log = logging.getLogger(__name__)

NODES = resolve("nodes")
PODS = resolve("pods")
LOG_PARAMETERS = ("tailLines", "follow", "timestamps", "previous", "sinceSeconds", "limitBytes")
DEFAULT_KUBELET_PORT = 10250


def choose_container(pod: dict[str, Any], requested: str | None) -> str:
    """The container a request means: the one named, or the only one; errors word it as Kubernetes does."""
    name = pod["metadata"]["name"]
    containers = [c["name"] for c in pod.get("spec", {}).get("containers") or []]
    init_containers = [c["name"] for c in pod.get("spec", {}).get("initContainers") or []]
    if requested:
        if requested not in containers + init_containers:
            raise errors.BadRequest(f"container {requested} is not valid for pod {name}")
        return requested
    if len(containers) == 1:
        return containers[0]
    raise errors.BadRequest(f"a container name must be specified for pod {name}, choose one of: "
                            f"[{' '.join(containers)}]")


def kubelet_url(node: dict[str, Any]) -> str:
    status = node.get("status") or {}
    addresses = {entry.get("type"): entry.get("address") for entry in status.get("addresses") or []}
    address = addresses.get("InternalIP") or addresses.get("Hostname")
    if not address:
        raise errors.ServiceUnavailable(f"node {node['metadata']['name']} has no address for its kubelet")
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port") or DEFAULT_KUBELET_PORT
    return f"https://{address}:{port}"


class KubeletProxy:
    def __init__(self, registry: Registry, token: str | None, ca_file: str | None) -> None:
        self.registry = registry
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # Without a CA the kubelets' self-signed certificates cannot be verified; the token still authenticates us.
        self._http = httpx.AsyncClient(headers=headers, verify=ca_file or False, timeout=httpx.Timeout(30, read=None))

    async def close(self) -> None:
        await self._http.aclose()

    async def _target(self, namespace: str, name: str, container: str | None) -> tuple[str, str]:
        pod = await self.registry.get(PODS, namespace, name)
        chosen = choose_container(pod, container)
        node_name = pod.get("spec", {}).get("nodeName")
        if not node_name:
            raise errors.BadRequest(f"pod {name} does not have a host assigned")
        node = await self.registry.get(NODES, None, node_name)
        return kubelet_url(node), chosen

    async def logs(self, namespace: str, name: str, params: dict[str, str]) -> AsyncIterator[bytes]:
        """The container's log as the kubelet streams it; errors are raised before the first byte."""
        base, container = await self._target(namespace, name, params.get("container"))
        query = {key: params[key] for key in LOG_PARAMETERS if key in params}
        request = self._http.build_request("GET", f"{base}/containerLogs/{namespace}/{name}/{container}", params=query)
        response = await self._send(request, name, stream=True)
        return _body_chunks(response)

    async def run(self, namespace: str, name: str, container: str | None, command: list[str]) -> dict[str, Any]:
        """Run ``command`` in the container to completion: ``{"exitCode", "stdout", "stderr"}``."""
        if not command or not all(isinstance(part, str) for part in command):
            raise errors.BadRequest("you must specify at least one command for the container")
        base, chosen = await self._target(namespace, name, container)
        request = self._http.build_request("POST", f"{base}/run/{namespace}/{name}/{chosen}",
                                           json={"command": command})
        response = await self._send(request, name, stream=False)
        return response.json()

    async def _send(self, request: httpx.Request, name: str, stream: bool) -> httpx.Response:
        try:
            response = await self._http.send(request, stream=stream)
        except httpx.TransportError as error:
            log.warning("kubelet for pod %s unreachable at %s: %s", name, request.url, error)
            raise errors.ServiceUnavailable(f"error dialing the kubelet at {request.url.host}: {error}") from None
        if response.status_code >= 400:
            body = (await response.aread()).decode(errors="replace")
            await response.aclose()
            if response.status_code == 404:
                raise errors.NotFound(f"the kubelet has no such container for pod {name}: {body.strip()}")
            raise errors.ServiceUnavailable(f"the kubelet answered {response.status_code}: {body.strip()}")
        return response


async def _body_chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    try:
        async for chunk in response.aiter_raw():
            yield chunk
    finally:
        await response.aclose()
