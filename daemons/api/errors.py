"""The error hierarchy shared by the apiserver and every client, and its mapping to ``Status``.

Shaped like docker-py's: one ``APIError`` carrying the HTTP status, with a
subclass per condition callers branch on. The apiserver raises these and turns
them into a ``Status`` body in one handler; the client turns a ``Status`` body
back into the same class with ``from_status``.
"""

from __future__ import annotations

from typing import Any, ClassVar


class MiniK8sError(Exception):
    """Base of everything this project raises on purpose."""


class APIError(MiniK8sError):
    """An error the API answered (or would answer) with a ``Status``."""

    code: ClassVar[int] = 500
    reason: ClassVar[str] = "InternalError"

    def __init__(
        self,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        status: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        self.status = status

    @property
    def status_code(self) -> int:
        return self.code

    @property
    def causes(self) -> list[dict[str, str]]:
        return list((self.details or {}).get("causes") or [])

    def to_status(self) -> dict[str, Any]:
        """The ``Status`` body, fields in upstream's order with empty ones left out, so it encodes byte for byte
        as upstream's does."""
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
        if self.message:
            body["message"] = self.message
        if self.reason:
            body["reason"] = self.reason
        details = status_details(self.details or {})
        if details or self.details == {}:  # an explicitly empty details object is sent, as upstream's
            body["details"] = details
        body["code"] = self.code
        return body

    @classmethod
    def from_status(cls, code: int, body: dict[str, Any] | None, fallback: str = "") -> APIError:
        """The exception for an error response: by ``reason`` first, then by HTTP code."""
        body = body if isinstance(body, dict) else {}
        reason = body.get("reason") or ""
        message = body.get("message") or fallback or f"the server answered {code}"
        error_class = _BY_REASON.get(reason) or _BY_CODE.get(code) or (ServerError if code >= 500 else APIError)
        error = error_class(message, details=body.get("details"), status=body or None)
        if error_class is APIError or error_class is ServerError:
            error.code = code  # type: ignore[misc]
        return error

    def __str__(self) -> str:
        return self.message


class BadRequest(APIError):
    code = 400
    reason = "BadRequest"


class Unauthorized(APIError):
    code = 401
    reason = "Unauthorized"


class Forbidden(APIError):
    code = 403
    reason = "Forbidden"


class NotFound(APIError):
    code = 404
    reason = "NotFound"


class MethodNotAllowed(APIError):
    code = 405
    reason = "MethodNotAllowed"


class NotAcceptable(APIError):
    code = 406
    reason = "NotAcceptable"


class Conflict(APIError):
    code = 409
    reason = "Conflict"


class AlreadyExists(Conflict):
    reason = "AlreadyExists"


class Gone(APIError):
    """The requested resourceVersion has been compacted away: relist."""

    code = 410
    reason = "Expired"


class RequestEntityTooLarge(APIError):
    code = 413
    reason = "RequestEntityTooLarge"


class UnsupportedMediaType(APIError):
    code = 415
    reason = "UnsupportedMediaType"


class Invalid(APIError):
    """Validation failed; ``details.causes`` names each field."""

    code = 422
    reason = "Invalid"

    @classmethod
    def for_object(cls, kind: str, name: str | None, causes: list[dict[str, str]], group: str = "") -> Invalid:
        summary = ", ".join(f"{cause['field']}: {cause['message']}" for cause in causes)
        return cls(
            f'{kind} "{name or ""}" is invalid: {summary}',
            details={"name": name or "", "group": group, "kind": kind, "causes": causes},
        )


class ServerError(APIError):
    code = 500
    reason = "InternalError"


class ServiceUnavailable(ServerError):
    code = 503
    reason = "ServiceUnavailable"


class ServerTimeout(ServerError):
    code = 504
    reason = "Timeout"


_BY_REASON: dict[str, type[APIError]] = {
    error.reason: error
    for error in (BadRequest, Unauthorized, Forbidden, NotFound, MethodNotAllowed, NotAcceptable, Conflict,
                  AlreadyExists, Gone, RequestEntityTooLarge, UnsupportedMediaType, Invalid, ServiceUnavailable)
}
_BY_REASON["Gone"] = Gone
_BY_CODE: dict[int, type[APIError]] = {
    error.code: error
    for error in (BadRequest, Unauthorized, Forbidden, NotFound, MethodNotAllowed, NotAcceptable, Conflict, Gone,
                  RequestEntityTooLarge, UnsupportedMediaType, Invalid, ServiceUnavailable, ServerTimeout)
}


# The fields of upstream's StatusDetails and StatusCause, in the order Go encodes them.
_DETAIL_FIELDS = ("name", "group", "kind", "uid", "causes", "retryAfterSeconds")
_CAUSE_FIELDS = ("reason", "message", "field")


def status_details(details: dict[str, Any]) -> dict[str, Any]:
    """``details`` in upstream's field order, empty fields left out as Go's ``omitempty`` does."""
    ordered = {field: details[field] for field in _DETAIL_FIELDS if details.get(field)}
    if "causes" in ordered:
        ordered["causes"] = [{field: cause[field] for field in _CAUSE_FIELDS if cause.get(field)}
                             for cause in ordered["causes"]]
    return ordered


def route_not_found() -> NotFound:
    """A path the server does not serve, as upstream answers it: with an empty ``details`` object, which
    clients dereference (kubectl debug does, to tell a missing subresource from a missing pod)."""
    return NotFound("the server could not find the requested resource", details={})


def not_found(resource_name: str, name: str, group: str = "") -> NotFound:
    qualified = f"{resource_name}.{group}" if group else resource_name
    return NotFound(
        f'{qualified} "{name}" not found',
        details={"name": name, "group": group, "kind": resource_name},
    )


def already_exists(resource_name: str, name: str, group: str = "") -> AlreadyExists:
    qualified = f"{resource_name}.{group}" if group else resource_name
    return AlreadyExists(
        f'{qualified} "{name}" already exists',
        details={"name": name, "group": group, "kind": resource_name},
    )


def conflict(resource_name: str, name: str, group: str = "") -> Conflict:
    qualified = f"{resource_name}.{group}" if group else resource_name
    return Conflict(
        f'Operation cannot be fulfilled on {qualified} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        details={"name": name, "group": group, "kind": resource_name},
    )


class ConnectionFailed(MiniK8sError):
    """The server could not be reached at all."""
