"""Content negotiation on ``Accept`` and the JSON encoding upstream's apiserver writes.

An ``Accept`` header lists alternatives; the first servable one (highest ``q`` first, then in the order
written) picks the shape of the answer: the object itself, a ``Table`` (``as=Table``) or only its metadata
(``as=PartialObjectMetadata`` for a get or a watch, ``as=PartialObjectMetadataList`` for a list), each of the
``meta.k8s.io`` ones in ``v1`` or ``v1beta1`` as requested. Every answer is JSON, which also serves clients
asking for YAML (JSON is YAML) or protobuf alongside JSON (client-go reads the answer by its Content-Type).
When no alternative can be served the answer is 406 NotAcceptable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from fastapi.responses import JSONResponse

from daemons.api import errors

Obj = dict[str, Any]
Shape = Literal["object", "list", "watch"]
META_GROUP = "meta.k8s.io"
META_VERSIONS = ("v1", "v1beta1")
MEDIA_TYPES = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")
ANY_MEDIA_TYPES = ("*/*", "application/*", *MEDIA_TYPES)
# Go's encoding/json escapes these inside strings (HTML safety, and JavaScript line terminators).
_GO_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
                             "\u2029": "\\u2029"})


@dataclass(frozen=True)
class Rendering:
    """How to answer: ``as_`` is "" for the object itself, else ``Table`` or ``PartialObjectMetadata``."""

    as_: str = ""
    version: str = "v1"

    @property
    def table(self) -> bool:
        return self.as_ == "Table"

    @property
    def metadata(self) -> bool:
        return self.as_ == "PartialObjectMetadata"

    def object(self, obj: Obj) -> Obj:
        """One object as answered outside a table: itself, or its PartialObjectMetadata."""
        return partial_object(obj, self.version) if self.metadata else obj


@dataclass(frozen=True)
class MediaRange:
    media_type: str
    params: dict[str, str]
    quality: float


def parse_accept(header: str) -> list[MediaRange]:
    """The alternatives of an ``Accept`` header, most preferred first (by ``q``, then as written)."""
    ranges = []
    for alternative in header.split(","):
        media_type, *raw_params = (part.strip() for part in alternative.split(";"))
        if not media_type:
            continue
        params = {}
        for param in raw_params:
            key, _, value = param.partition("=")
            params[key.strip().lower()] = value.strip().strip('"')
        try:
            quality = float(params.pop("q", "1"))
        except ValueError:
            quality = 1.0
        if quality > 0:
            ranges.append(MediaRange(media_type.lower(), params, quality))
    return sorted(ranges, key=lambda media_range: -media_range.quality)


def _servable(media_range: MediaRange, shape: Shape) -> Rendering | None:
    if media_range.media_type not in ANY_MEDIA_TYPES:
        return None
    as_ = media_range.params.get("as")
    if as_ is None:
        return Rendering()
    version = media_range.params.get("v", "")
    if media_range.params.get("g") != META_GROUP or version not in META_VERSIONS:
        return None
    if as_ == "Table":
        return Rendering("Table", version)
    wanted = "PartialObjectMetadataList" if shape == "list" else "PartialObjectMetadata"
    return Rendering("PartialObjectMetadata", version) if as_ == wanted else None


def negotiate(accept: str, shape: Shape) -> Rendering:
    """The rendering for the first servable alternative of ``accept``; 406 when there is none."""
    if not accept.strip():
        return Rendering()
    for media_range in parse_accept(accept):
        rendering = _servable(media_range, shape)
        if rendering is not None:
            return rendering
    kind = "PartialObjectMetadataList" if shape == "list" else "PartialObjectMetadata"
    offered = [*MEDIA_TYPES, *(f"application/json;as={as_};v={version};g={META_GROUP}"
                               for as_ in ("Table", kind) for version in META_VERSIONS)]
    raise errors.NotAcceptable(f"only the following media types are accepted: {', '.join(offered)}")


def partial_object(obj: Obj, version: str) -> Obj:
    return {"kind": "PartialObjectMetadata", "apiVersion": f"{META_GROUP}/{version}", "metadata": obj.get("metadata",
                                                                                                          {})}


def partial_list(items: list[Obj], resource_version: str, version: str) -> Obj:
    return {"kind": "PartialObjectMetadataList", "apiVersion": f"{META_GROUP}/{version}",
            "metadata": {"resourceVersion": resource_version},
            "items": [partial_object(item, version) for item in items]}


def encode(body: Any) -> bytes:
    """``body`` as upstream's JSON serializer writes it: compact, UTF-8, Go's escapes, a trailing newline."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).translate(_GO_ESCAPES).encode() + b"\n"


class KubeJSONResponse(JSONResponse):
    """A JSON response encoded as upstream's apiserver encodes it."""

    def render(self, content: Any) -> bytes:
        return encode(content)


def warning_header(texts: list[str]) -> str:
    """A ``Warning`` header value of ``299 -`` warnings as upstream writes them: ``"`` and ``\\`` escaped, control
    characters turned to spaces (as Go writes header values), UTF-8 kept (carried through Starlette's latin-1)."""
    def quoted(text: str) -> str:
        escaped = "".join(" " if ord(char) < 0x20 or char == "\x7f" else f"\\{char}" if char in '"\\' else char
                          for char in text)
        return f'"{escaped}"'

    return ", ".join(f"299 - {quoted(text)}" for text in texts).encode().decode("latin-1")


def status_response(error: errors.APIError) -> KubeJSONResponse:
    return KubeJSONResponse(error.to_status(), status_code=error.code)
