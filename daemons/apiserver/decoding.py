"""Request bodies decoded with bounds, so a hostile body is refused fast and cannot starve other requests.

One function decodes every body the apiserver reads (objects, patches, DeleteOptions, bindings): JSON, YAML
or Kubernetes protobuf. The limits, each named in the 400 (or 413) ``Status`` that refuses a body:

- ``MAX_BODY_BYTES`` (3 MiB, upstream's request size limit): a larger body is refused with 413 before it is
  read whole.
- ``MAX_DEPTH`` (100 levels of objects and arrays): deeper bodies are refused. Upstream Kubernetes bounds JSON
  at 10,000; our kinds nest about 15 deep and Python's decoders recurse, so 100 leaves room and keeps stacks
  small.
- ``MAX_YAML_ALIASES`` (1,000 alias uses) and ``MAX_EXPANDED_NODES`` (1,000,000 values once every alias is
  expanded): the "billion laughs" body (CVE-2019-11253) is refused while it is being composed, before
  anything expands. A 3 MiB JSON body holds at most about as many values.
- Duplicate keys, invalid UTF-8 (and unpaired surrogate escapes), integers outside 64 bits, and NaN or
  Infinity are refused: upstream's strict decoding refuses them, and our storage could not round-trip them.

Bodies over ``THREAD_THRESHOLD`` (256 KiB) are decoded on a worker thread so the event loop keeps serving.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import math
from typing import Any

import yaml
from fastapi import Request
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.cyaml import CParser
from yaml.resolver import Resolver

from daemons.api import errors
from daemons.apiserver import protobuf

MAX_BODY_BYTES = 3 * 1024 * 1024
MAX_DEPTH = 100
MAX_YAML_ALIASES = 1_000
MAX_EXPANDED_NODES = 1_000_000
THREAD_THRESHOLD = 256 * 1024
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _depth_error() -> errors.BadRequest:
    return errors.BadRequest(f"the request body nests deeper than the limit of {MAX_DEPTH} levels")


def _check_int(value: int, text: str) -> int:
    if not INT64_MIN <= value <= INT64_MAX:
        raise errors.BadRequest(f"the number {text[:40]} in the request body does not fit in 64 bits")
    return value


def _json_int(text: str) -> int:
    if len(text) > 20:  # int64 has at most 19 digits and a sign; longer text is out of range, so never parse it
        raise errors.BadRequest(f"the number {text[:40]}... in the request body does not fit in 64 bits")
    return _check_int(int(text), text)


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise errors.BadRequest(f"the number {text[:40]} in the request body is out of the range of a 64-bit float")
    return value


def _json_constant(text: str) -> float:
    raise errors.BadRequest(f"the request body holds {text}, which is not a number JSON allows")


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise errors.BadRequest(f'the request body has a duplicate key "{key}"')
            seen.add(key)
    return obj


def _check_string(text: str) -> str:
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            raise errors.BadRequest("the request body has an unpaired UTF-16 surrogate escape") from None
    return text


def _check_tree(value: Any, depth: int = 1) -> None:
    """Depth and string checks the JSON decoder's hooks cannot make (it builds innermost values first)."""
    if depth > MAX_DEPTH:
        raise _depth_error()
    if isinstance(value, dict):
        for key, item in value.items():
            _check_string(key)
            _check_tree(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_tree(item, depth + 1)
    elif isinstance(value, str):
        _check_string(value)


def decode_json(text: str) -> Any:
    try:
        value = json.loads(text, object_pairs_hook=_json_object, parse_int=_json_int, parse_float=_json_float,
                           parse_constant=_json_constant)
    except RecursionError:
        raise _depth_error() from None
    _check_tree(value)
    return value


def _scalar_key(key: Any) -> str:
    """A mapping key as the JSON text YAML-to-JSON conversion gives it (``1`` -> ``"1"``, ``true`` -> ``"true"``)."""
    if isinstance(key, str):
        return key
    if key is None:
        return "null"
    if isinstance(key, bool | int | float):
        return json.dumps(_plain(key, 0))
    return str(key)


class BoundedLoader(Composer, CParser, SafeConstructor, Resolver):
    """PyYAML's safe loader, counting aliases and expanded size while it composes, and bounding depth.

    libyaml's C loader also composes in C, out of reach of these counts, so only its parser (scanning and
    events, the costly part) is used, under PyYAML's Python composer. Nodes are shared between an anchor and
    its aliases, so nothing expands until the limits have been checked.
    """

    def __init__(self, stream: str) -> None:
        CParser.__init__(self, stream)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self.aliases = 0
        self.open_sizes: list[int] = []  # the expanded size of each node being composed, innermost last
        self.sizes: dict[int, int] = {}  # the expanded size of each finished node, by id

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_YAML_ALIASES:
                raise errors.BadRequest(f"the request body uses more than the limit of {MAX_YAML_ALIASES} YAML "
                                        "aliases")
            node = super().compose_node(parent, index)
            if id(node) not in self.sizes:
                raise errors.BadRequest("the request body has a YAML alias to a node that contains it")
            size = self.sizes[id(node)]
        else:
            if len(self.open_sizes) >= MAX_DEPTH:
                raise _depth_error()
            self.open_sizes.append(1)
            node = super().compose_node(parent, index)
            size = self.open_sizes.pop()
            self.sizes[id(node)] = size
        if self.open_sizes:
            self.open_sizes[-1] += size
            size = self.open_sizes[-1]
        if size > MAX_EXPANDED_NODES:
            raise errors.BadRequest(f"the request body expands past the limit of {MAX_EXPANDED_NODES} values once "
                                    "its YAML aliases are expanded")
        return node

    def mapping_key(self, node: yaml.Node) -> str:
        key = self.construct_object(node, deep=True)
        if isinstance(key, list | dict):
            raise errors.BadRequest("the request body has a YAML mapping key that is not a scalar")
        return _scalar_key(key)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[str, Any]:
        """A mapping with JSON's string keys (``1`` and ``true`` are distinct keys, though equal in Python),
        refusing a key written twice; keys merged in with ``<<`` may still be overridden."""
        written: set[str] = set()
        for key_node, _value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            name = self.mapping_key(key_node)
            if name in written:
                raise errors.BadRequest(f'the request body has a duplicate key "{name}"')
            written.add(name)
        self.flatten_mapping(node)
        return {self.mapping_key(key_node): self.construct_object(value_node, deep=deep)
                for key_node, value_node in node.value}

    def construct_yaml_timestamp(self, node: yaml.ScalarNode) -> str:
        """A timestamp stays the text it was, as a YAML-to-JSON conversion keeps it."""
        return str(self.construct_scalar(node))

    def construct_yaml_binary(self, node: yaml.ScalarNode) -> str:
        return str(self.construct_scalar(node))


BoundedLoader.add_constructor("tag:yaml.org,2002:timestamp", BoundedLoader.construct_yaml_timestamp)
BoundedLoader.add_constructor("tag:yaml.org,2002:binary", BoundedLoader.construct_yaml_binary)


def _plain(value: Any, depth: int) -> Any:
    """The JSON value of a composed YAML document: aliases copied out (already bounded), numbers checked."""
    if depth > MAX_DEPTH:
        raise _depth_error()
    if isinstance(value, dict):
        plain: dict[str, Any] = {}
        for key, item in value.items():
            plain[_check_string(key)] = _plain(item, depth + 1)
        return plain
    if isinstance(value, list):
        return [_plain(item, depth + 1) for item in value]
    if isinstance(value, set):  # !!set: a mapping of keys to nulls, as its JSON form
        return dict.fromkeys(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return _check_int(value, str(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise errors.BadRequest("the request body holds NaN or Infinity, which JSON does not allow")
        return value
    if isinstance(value, datetime.date):
        return value.isoformat()
    return _check_string(str(value))


def decode_yaml(text: str) -> Any:
    loader = BoundedLoader(text)
    try:
        return _plain(loader.get_single_data(), 1)
    except yaml.YAMLError as error:
        if "maximum nesting depth" in str(error):  # libyaml's own bound (1,000), met before ours on flow style
            raise _depth_error() from None
        raise errors.BadRequest(f"the request body is not valid YAML: {error}") from None
    except RecursionError:
        raise _depth_error() from None
    finally:
        loader.dispose()


def decode_body(raw: bytes, content_type: str) -> Any:
    """JSON, YAML where the content type says so, or Kubernetes protobuf, within this module's limits.

    kubectl 1.33's typed clients POST built-in kinds as ``application/vnd.kubernetes.protobuf`` (and do not retry
    as JSON); those decode to the dict their JSON would have been. A kind the decoder does not cover gets 415,
    a body it cannot read 400.
    """
    if len(raw) > MAX_BODY_BYTES:
        raise errors.RequestEntityTooLarge(f"the request body is {len(raw)} bytes; the limit is {MAX_BODY_BYTES}")
    if "protobuf" in content_type:
        try:
            return protobuf.decode_object(raw)
        except protobuf.UnsupportedKind as error:
            raise errors.UnsupportedMediaType(str(error)) from None
        except protobuf.ProtobufError as error:
            raise errors.BadRequest(f"the request body is not valid Kubernetes protobuf: {error}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise errors.BadRequest(f"the request body is not valid UTF-8 (at byte {error.start})") from None
    if not text.strip():
        raise errors.BadRequest("the request body is empty")
    if "yaml" in content_type and not text.lstrip().startswith(("{", "[")):
        return decode_yaml(text)
    try:
        return decode_json(text)
    except ValueError as json_error:
        if "yaml" not in content_type:
            raise errors.BadRequest(f"the request body is not valid JSON: {json_error}") from None
    return decode_yaml(text)


async def read_body(request: Request) -> bytes:
    """The body, refused with 413 as soon as it passes ``MAX_BODY_BYTES`` (a chunked body has no length to check
    up front)."""
    if "content-length" in request.headers:  # checked against the limit before the route ran
        return await request.body()
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise errors.RequestEntityTooLarge(f"the request body is larger than the limit of {MAX_BODY_BYTES} "
                                               "bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def request_body(request: Request) -> Any:
    """The decoded body of a request; large ones on a worker thread, so the event loop keeps serving."""
    raw = await read_body(request)
    content_type = request.headers.get("content-type", "")
    if len(raw) > THREAD_THRESHOLD:
        return await asyncio.to_thread(decode_body, raw, content_type)
    return decode_body(raw, content_type)
