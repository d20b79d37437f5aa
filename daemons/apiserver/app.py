"""The apiserver's HTTP layer: routing every REST path of the resource table onto the registry."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from daemons.api import errors, tables
from daemons.api.resources import Resource, find
from daemons.apiserver import discovery, metrics_api, openapi
from daemons.apiserver.admission import AllowAuthenticated, Authorizer
from daemons.apiserver.auth import Authenticator, load_token_file
from daemons.apiserver.bootstrap import bootstrap, default_advertise_address
from daemons.apiserver.cache import WatchCache
from daemons.apiserver.decoding import MAX_BODY_BYTES, decode_body, read_body, request_body
from daemons.apiserver.kubelet_proxy import KubeletProxy
from daemons.apiserver.negotiation import (
    Rendering,
    Shape,
    negotiate,
    partial_list,
    status_response,
    warning_header,
)
from daemons.apiserver.publisher import EventPublisher
from daemons.apiserver.registry import Registry, WriteOptions
from daemons.apiserver.settings import ApiServerSettings
from daemons.apiserver.storage import Storage
from daemons.apiserver.watch import object_events

log = logging.getLogger(__name__)

PATCH_TYPES = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
}

REQUESTS = Counter("apiserver_request_total", "Requests by verb, resource and HTTP code",
                   ["verb", "resource", "code"])
LATENCY = Histogram("apiserver_request_duration_seconds", "Request latency by verb and resource (watches excluded)",
                    ["verb", "resource"],
                    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))

Obj = dict[str, Any]


@dataclass(frozen=True)
class Target:
    """What a REST path names: a resource collection, one object, or one of its subresources."""

    resource: Resource
    namespace: str | None
    name: str | None
    subresource: str | None


def parse_target(group: str, version: str, rest: list[str]) -> Target:
    not_found = errors.route_not_found()
    if len(rest) >= 3 and rest[0] == "namespaces":
        candidate = find(group, version, rest[2])
        if candidate is not None and candidate.namespaced:
            if len(rest) > 5:
                raise not_found
            return _target(candidate, rest[1], rest[3:])
    resource = find(group, version, rest[0])
    if resource is None or len(rest) > 3:
        raise not_found
    if resource.namespaced and len(rest) > 1:
        raise not_found
    return _target(resource, None, rest[1:])


def _target(resource: Resource, namespace: str | None, rest: list[str]) -> Target:
    name = rest[0] if rest else None
    subresource = rest[1] if len(rest) > 1 else None
    if subresource is not None and subresource not in resource.subresources:
        raise errors.route_not_found()
    return Target(resource, namespace, name, subresource)


def request_verb(method: str, target: Target | None, watch: bool) -> str:
    if target is None:
        return method
    if method == "GET":
        return "WATCH" if watch else ("LIST" if target.name is None else "GET")
    if method == "DELETE" and target.name is None:
        return "DELETECOLLECTION"
    return {"POST": "CREATE", "PUT": "UPDATE"}.get(method, method)


def rendering(request: Request, shape: Shape) -> Rendering:
    return negotiate(request.headers.get("accept", ""), shape)


def is_watch(request: Request) -> bool:
    return request.query_params.get("watch", "").lower() in ("1", "true")


def list_body(resource: Resource, items: list[Obj], revision: int) -> Obj:
    return {"kind": resource.list_kind, "apiVersion": resource.api_version,
            "metadata": {"resourceVersion": str(revision)}, "items": items}


def json_response(body: Obj, status_code: int = 200, warnings: list[str] | None = None) -> JSONResponse:
    headers = {"Warning": warning_header([f'unknown field "{field}"' for field in warnings])} if warnings else None
    return JSONResponse(body, status_code=status_code, headers=headers)


def status_success(details: Obj | None = None, code: int = 200) -> Obj:
    body: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}
    if details:
        body["details"] = details
    return body


def create_app(settings: ApiServerSettings) -> FastAPI:
    storage = Storage(settings.etcd_servers)
    cache = WatchCache(storage)
    registry = Registry(storage, settings.service_network, cache)
    advertise_address = settings.advertise_address or default_advertise_address()
    kubelet_token = Path(settings.kubelet_client_token_file).read_text().strip() \
        if settings.kubelet_client_token_file else None
    kubelets = KubeletProxy(registry, kubelet_token, settings.kubelet_certificate_authority)
    authenticator = Authenticator(load_token_file(settings.token_auth_file) if settings.token_auth_file else None)
    authorizer: Authorizer = AllowAuthenticated()
    bootstrapped = asyncio.Event()
    usage_api = (metrics_api.MetricsApi(registry, settings.prometheus_url, settings.metrics_window)
                 if settings.prometheus_url else None)

    async def bring_up() -> None:
        await bootstrap(registry, settings.secure_port, advertise_address)
        bootstrapped.set()

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        log.info("services get cluster IPs from %s and node ports from %s; advertising %s:%s",
                 registry.network.cidr, registry.network.port_range, advertise_address, settings.secure_port)
        bootstrapping = asyncio.create_task(bring_up())
        caching = asyncio.create_task(cache.run())
        publisher = None
        if settings.amqp_url:
            publisher = asyncio.create_task(EventPublisher(storage, settings.amqp_url).run())
        try:
            yield
        finally:
            for task in (bootstrapping, caching, publisher):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            await kubelets.close()
            if usage_api is not None:
                usage_api.close()
            await storage.close()

    app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.kubelets = kubelets

    @app.exception_handler(errors.APIError)
    async def api_error(_request: Request, error: errors.APIError) -> JSONResponse:
        return status_response(error)

    app.add_middleware(Gatekeeper, authenticator=authenticator)

    @app.get("/healthz")
    @app.get("/livez")
    async def healthz() -> PlainTextResponse:
        return PlainTextResponse("ok")

    @app.get("/readyz")
    async def readyz() -> PlainTextResponse:
        try:
            await storage.revision()
        except errors.ServiceUnavailable as error:
            return PlainTextResponse(f"[-]etcd failed: {error}", status_code=503)
        if not bootstrapped.is_set():
            return PlainTextResponse("[-]poststarthook/bootstrap-controller failed: not finished", status_code=503)
        return PlainTextResponse("ok")

    @app.get("/version")
    async def version() -> JSONResponse:
        return JSONResponse(discovery.version_info())

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/openapi/v2")
    async def openapi_v2(request: Request) -> Response:
        if "protobuf" in request.headers.get("accept", ""):
            return Response(openapi.document_v2_protobuf(), media_type=openapi.V2_MEDIA_TYPE)
        return JSONResponse(openapi.document_v2())

    @app.get("/openapi/v3")
    async def openapi_root() -> JSONResponse:
        return JSONResponse(openapi.root())

    @app.get("/openapi/v3/{path:path}")
    async def openapi_group_version(path: str) -> JSONResponse:
        segments = path.split("/")
        if segments[:1] == ["api"] and len(segments) == 2:
            return discovered(openapi.document("", segments[1]))
        if segments[:1] == ["apis"] and len(segments) == 3:
            return discovered(openapi.document(segments[1], segments[2]))
        raise errors.NotFound("the server could not find the requested resource")

    @app.get("/api")
    async def core_versions(request: Request) -> JSONResponse:
        return JSONResponse(discovery.core_versions(request.url.netloc))

    @app.get("/apis")
    async def api_groups() -> JSONResponse:
        return JSONResponse(discovery.group_list(metrics_api.SERVED if usage_api else None))

    rest_methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]

    @app.api_route("/api/{path:path}", methods=rest_methods)
    async def core_api(request: Request, path: str) -> Response:
        segments = [part for part in path.split("/") if part]
        if len(segments) == 1 and request.method == "GET":
            return discovered(discovery.resource_list("", segments[0]))
        return await serve(request, "", segments[0], segments[1:])

    @app.api_route("/apis/{path:path}", methods=rest_methods)
    async def group_api(request: Request, path: str) -> Response:
        segments = [part for part in path.split("/") if part]
        if usage_api is not None and segments[:1] == [metrics_api.GROUP]:
            return await usage_api.serve(request, segments[1:])
        if len(segments) == 1 and request.method == "GET":
            return discovered(discovery.group(segments[0]))
        if len(segments) == 2 and request.method == "GET":
            return discovered(discovery.resource_list(segments[0], segments[1]))
        if len(segments) < 3:
            raise errors.NotFound("the server could not find the requested resource")
        return await serve(request, segments[0], segments[1], segments[2:])

    async def serve(request: Request, group: str, version: str, rest: list[str]) -> Response:
        if not rest:
            raise errors.NotFound("the server could not find the requested resource")
        target = parse_target(group, version, rest)
        handler = HANDLERS.get((request.method, target.name is not None, target.subresource))
        if handler is None:
            raise errors.MethodNotAllowed(f"{request.method} is not supported on this path")
        await authorizer.authorize(getattr(request.state, "user", None), request_verb(request.method, target,
                                   is_watch(request)).lower(), target.resource, target.namespace, target.name,
                                   target.subresource)
        return await handler(registry, request, target)

    return app


def discovered(document: Obj | None) -> JSONResponse:
    if document is None:
        raise errors.NotFound("the server could not find the requested resource")
    return JSONResponse(document)


def classify(method: str, path: str, watch: bool) -> tuple[str, str]:
    """The metric labels of a request: its Kubernetes verb and resource."""
    segments = [part for part in path.split("/") if part]
    try:
        if segments[:1] == ["api"] and len(segments) > 2:
            target: Target | None = parse_target("", segments[1], segments[2:])
        elif segments[:1] == ["apis"] and len(segments) > 3:
            target = parse_target(segments[1], segments[2], segments[3:])
        else:
            target = None
    except errors.APIError:
        target = None
    resource_name = target.resource.plural if target else ""
    return request_verb(method, target, watch), resource_name


class Gatekeeper:
    """Authentication, the body size limit and request metrics, before any route runs.

    A plain ASGI middleware: it never buffers responses, so watch streams pass straight through.
    """

    def __init__(self, app: ASGIApp, authenticator: Authenticator) -> None:
        self.app = app
        self.authenticator = authenticator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = dict(scope["headers"])
        query = parse_qs(scope.get("query_string", b"").decode())
        watch = query.get("watch", [""])[0].lower() in ("1", "true")
        verb, resource_name = classify(scope["method"], scope["path"], watch)
        status = {"code": 500}

        async def send_and_record(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        authorization = headers.get(b"authorization", b"").decode("latin-1") or None
        user = self.authenticator.authenticate(scope["path"], authorization)
        scope.setdefault("state", {})["user"] = user  # for the authorizer, as request.state.user
        if user is None:
            await status_response(errors.Unauthorized("Unauthorized"))(
                scope, receive, send_and_record)
        elif int(headers.get(b"content-length") or 0) > MAX_BODY_BYTES:
            error = errors.RequestEntityTooLarge(f"the request body is larger than the limit of {MAX_BODY_BYTES} "
                                                 "bytes")
            await status_response(error)(scope, receive, send_and_record)
        else:
            await self.app(scope, receive, send_and_record)
        REQUESTS.labels(verb, resource_name, str(status["code"])).inc()
        if verb != "WATCH":
            LATENCY.labels(verb, resource_name).observe(time.perf_counter() - started)


# --- handlers, one per (method, named, subresource) -----------------------------------------------

Handler = Callable[[Registry, Request, Target], Awaitable[Response]]


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "").lower() in ("1", "true")


def write_options(request: Request) -> WriteOptions:
    params = request.query_params
    return WriteOptions(dry_run=params.get("dryRun") == "All", field_manager=params.get("fieldManager"),
                        strict=params.get("fieldValidation") == "Strict", force=_flag(request, "force"))


async def _body(request: Request) -> Any:
    return await request_body(request)


async def list_or_watch(registry: Registry, request: Request, target: Target) -> Response:
    params = request.query_params
    if is_watch(request):
        return await watch_response(registry, request, target)
    shown = rendering(request, "list")
    items, revision = await registry.list(target.resource, target.namespace, params.get("labelSelector"),
                                          params.get("fieldSelector"))
    if shown.table:
        return JSONResponse(tables.table(target.resource, items, str(revision),
                                         include_object=params.get("includeObject", "Metadata")))
    if shown.metadata:
        return JSONResponse(partial_list(items, str(revision), shown.version))
    return JSONResponse(list_body(target.resource, items, revision))


async def watch_response(registry: Registry, request: Request, target: Target) -> Response:
    params = request.query_params
    events = await object_events(registry, target.resource, target.namespace, params.get("labelSelector"),
                                 params.get("fieldSelector"), params.get("resourceVersion"))
    answer_as = rendering(request, "watch")
    include_object = params.get("includeObject", "Metadata")
    timeout = float(params["timeoutSeconds"]) if params.get("timeoutSeconds") else None

    async def stream() -> AsyncIterator[bytes]:
        try:
            async with asyncio.timeout(timeout):
                async for event_type, obj in events:
                    shown = tables.table(target.resource, [obj], obj["metadata"]["resourceVersion"],
                                         include_object=include_object) if answer_as.table else answer_as.object(obj)
                    yield json.dumps({"type": event_type, "object": shown}).encode() + b"\n"
        except TimeoutError:
            return
        except errors.APIError as error:
            yield json.dumps({"type": "ERROR", "object": error.to_status()}).encode() + b"\n"
        except Exception:
            log.exception("watch of %s ended by an unexpected error", target.resource.plural)
            yield json.dumps({"type": "ERROR", "object": errors.ServerError(
                "the watch ended unexpectedly").to_status()}).encode() + b"\n"
        finally:
            await events.aclose()

    return StreamingResponse(stream(), media_type="application/json")


async def get_object(registry: Registry, request: Request, target: Target) -> Response:
    assert target.name is not None
    # resourceVersion=0 means "any version will do", which the watch cache answers without etcd, as in Kubernetes.
    shown = rendering(request, "object")
    any_version = request.query_params.get("resourceVersion") == "0"
    obj = await registry.get(target.resource, target.namespace, target.name, fresh=not any_version)
    if shown.table:
        return JSONResponse(tables.table(target.resource, [obj], obj["metadata"]["resourceVersion"],
                                         include_object=request.query_params.get("includeObject", "Metadata")))
    return JSONResponse(shown.object(obj))


async def get_scale(registry: Registry, _request: Request, target: Target) -> Response:
    assert target.name is not None and target.namespace is not None
    return JSONResponse(await registry.get_scale(target.resource, target.namespace, target.name))


async def create(registry: Registry, request: Request, target: Target) -> Response:
    obj, warnings = await registry.create(target.resource, target.namespace, await _body(request),
                                          write_options(request))
    return json_response(obj, 201, warnings)


async def bind(registry: Registry, request: Request, target: Target) -> Response:
    assert target.name is not None and target.namespace is not None
    await registry.bind(target.resource, target.namespace, target.name, await _body(request))
    return JSONResponse(status_success(code=201), status_code=201)


async def update(registry: Registry, request: Request, target: Target) -> Response:
    assert target.name is not None
    obj, warnings = await registry.update(target.resource, target.namespace, target.name, await _body(request),
                                          target.subresource, write_options(request))
    return json_response(obj, 200, warnings)


async def patch(registry: Registry, request: Request, target: Target) -> Response:
    assert target.name is not None
    content_type = request.headers.get("content-type", "").split(";")[0].strip()
    patch_type = PATCH_TYPES.get(content_type)
    if patch_type is None:
        raise errors.UnsupportedMediaType(f"the body of the request was in an unknown format - accepted media types "
                                          f"include: {', '.join(PATCH_TYPES)}")
    obj, warnings, created = await registry.patch(
        target.resource, target.namespace, target.name, patch_type, await _body(request), target.subresource,
        write_options(request))
    return json_response(obj, 201 if created else 200, warnings)


async def change_scale(registry: Registry, request: Request, target: Target) -> Response:
    assert target.name is not None and target.namespace is not None
    content_type = request.headers.get("content-type", "").split(";")[0].strip()
    scale = await registry.update_scale(target.resource, target.namespace, target.name, request.method,
                                        PATCH_TYPES.get(content_type), await _body(request))
    return JSONResponse(scale)


async def _delete_options(request: Request) -> Obj:
    raw = await read_body(request)
    options: Obj = decode_body(raw, request.headers.get("content-type", "")) if raw.strip() else {}
    if not isinstance(options, dict):
        raise errors.BadRequest("DeleteOptions must be an object")
    if "gracePeriodSeconds" in request.query_params:
        try:
            options["gracePeriodSeconds"] = int(request.query_params["gracePeriodSeconds"])
        except ValueError:
            raise errors.BadRequest("gracePeriodSeconds must be an integer") from None
    if "propagationPolicy" in request.query_params:
        options["propagationPolicy"] = request.query_params["propagationPolicy"]
    if "orphanDependents" in request.query_params:
        options["orphanDependents"] = request.query_params["orphanDependents"].lower() == "true"
    grace = options.get("gracePeriodSeconds")
    if grace is not None and (not isinstance(grace, int) or grace < 0):
        raise errors.Invalid.for_object("DeleteOptions", None, [{
            "reason": "FieldValueInvalid", "field": "gracePeriodSeconds",
            "message": f"Invalid value: {grace!r}: must be a non-negative integer"}])
    return options


async def delete(registry: Registry, request: Request, target: Target) -> Response:
    assert target.name is not None
    obj = await registry.delete(target.resource, target.namespace, target.name, await _delete_options(request),
                                write_options(request).dry_run)
    pending = bool(obj["metadata"].get("deletionTimestamp"))
    return JSONResponse(obj, status_code=202 if pending else 200)


async def delete_collection(registry: Registry, request: Request, target: Target) -> Response:
    params = request.query_params
    deleted = await registry.delete_collection(target.resource, target.namespace, params.get("labelSelector"),
                                               params.get("fieldSelector"), await _delete_options(request),
                                               write_options(request).dry_run)
    return JSONResponse(list_body(target.resource, deleted, 0) | {"metadata": {}})


async def pod_logs(_registry: Registry, request: Request, target: Target) -> Response:
    assert target.name is not None and target.namespace is not None
    kubelets: KubeletProxy = request.app.state.kubelets
    chunks = await kubelets.logs(target.namespace, target.name, dict(request.query_params))
    return StreamingResponse(chunks, media_type="text/plain")


async def pod_exec(_registry: Registry, request: Request, target: Target) -> Response:
    """Run a command to completion in a pod's container (our kubectl's exec: no terminal, no stdin)."""
    assert target.name is not None and target.namespace is not None
    raw = await read_body(request)
    body = decode_body(raw, request.headers.get("content-type", "")) if raw.strip() else {}
    if not isinstance(body, dict):
        raise errors.BadRequest("the exec body must be an object with a command list")
    command = body.get("command") or request.query_params.getlist("command")
    container = body.get("container") or request.query_params.get("container")
    kubelets: KubeletProxy = request.app.state.kubelets
    return JSONResponse(await kubelets.run(target.namespace, target.name, container, command))


HANDLERS: dict[tuple[str, bool, str | None], Handler] = {
    ("GET", False, None): list_or_watch,
    ("POST", False, None): create,
    ("DELETE", False, None): delete_collection,
    ("GET", True, None): get_object,
    ("PUT", True, None): update,
    ("PATCH", True, None): patch,
    ("DELETE", True, None): delete,
    ("GET", True, "status"): get_object,
    ("PUT", True, "status"): update,
    ("PATCH", True, "status"): patch,
    ("PUT", True, "finalize"): update,
    ("POST", True, "binding"): bind,
    ("GET", True, "scale"): get_scale,
    ("PUT", True, "scale"): change_scale,
    ("PATCH", True, "scale"): change_scale,
    ("GET", True, "log"): pod_logs,
    ("POST", True, "exec"): pod_exec,
}
