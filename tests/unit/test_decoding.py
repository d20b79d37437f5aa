"""Request bodies within bounds, Status bodies byte for byte as upstream writes them, and Accept negotiation."""

import json

import pytest

from daemons.api import errors
from daemons.apiserver.decoding import MAX_BODY_BYTES, MAX_DEPTH, MAX_YAML_ALIASES, decode_body
from daemons.apiserver.negotiation import (
    Rendering,
    encode,
    negotiate,
    parse_accept,
    partial_list,
    partial_object,
    warning_header,
)

JSON = "application/json"
YAML = "application/apply-patch+yaml"

LAUGHS = "\n".join(f'{name}: &{name} [{", ".join([f"*{previous}"] * 9)}]'
                   for previous, name in zip("abcdefgh", "bcdefghi", strict=True))
ALIAS_BOMB = ('a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + LAUGHS + "\n").encode()


def refusal(raw: bytes, content_type: str = JSON) -> errors.APIError:
    with pytest.raises(errors.APIError) as caught:
        decode_body(raw, content_type)
    return caught.value


def test_billion_laughs_is_refused_while_composing():
    assert len(ALIAS_BOMB) < 1600
    error = refusal(ALIAS_BOMB, YAML)
    assert error.code == 400 and "1000000 values" in error.message


def test_yaml_alias_count_is_bounded():
    anchors = "base: &x {a: 1}\nuses:\n" + "".join("  - *x\n" for _ in range(MAX_YAML_ALIASES + 1))
    assert f"limit of {MAX_YAML_ALIASES} YAML aliases" in refusal(anchors.encode(), YAML).message
    fine = "base: &x {a: 1}\nuses: [*x, *x]\n"
    assert decode_body(fine.encode(), YAML) == {"base": {"a": 1}, "uses": [{"a": 1}, {"a": 1}]}


def test_recursive_alias_is_refused():
    assert refusal(b"a: &x [*x]\n", YAML).code == 400


@pytest.mark.parametrize(("prefix", "content_type"), [(b"", JSON), (b"x: ", YAML)])
def test_nesting_is_bounded(prefix, content_type):
    def nested(levels):  # the YAML body's mapping is one level more
        levels -= len(prefix) // 3
        return prefix + b"[" * levels + b"]" * levels

    assert f"limit of {MAX_DEPTH} levels" in refusal(nested(100_000), content_type).message
    assert f"limit of {MAX_DEPTH} levels" in refusal(nested(MAX_DEPTH + 1), content_type).message
    assert decode_body(nested(MAX_DEPTH), content_type) is not None


@pytest.mark.parametrize(("raw", "content_type"), [(b'{"a": 1, "b": {"name": 1, "name": 2}}', JSON),
                                                   (b"a: 1\nb:\n  name: 1\n  name: 2\n", YAML)])
def test_duplicate_keys_are_refused_by_name(raw, content_type):
    assert refusal(raw, content_type).message == 'the request body has a duplicate key "name"'


def test_yaml_keys_become_json_keys_and_merges_may_override():
    body = b"1: x\ntrue: y\nnull: z\nbase: &b {p: 1, q: 2}\nmerged:\n  <<: *b\n  q: 3\nwhen: 2024-01-02\n"
    assert decode_body(body, YAML) == {"1": "x", "true": "y", "null": "z", "base": {"p": 1, "q": 2},
                                       "merged": {"p": 1, "q": 3}, "when": "2024-01-02"}


@pytest.mark.parametrize(("raw", "content_type", "words"), [
    (b'{"a": "\xff"}', JSON, "not valid UTF-8"),
    (b'a: "\xc3"', YAML, "not valid UTF-8"),
    (b'{"a": "\\ud800"}', JSON, "surrogate"),
    (b'{"a": 9223372036854775808}', JSON, "64 bits"),
    (b'{"a": -9223372036854775809}', JSON, "64 bits"),
    (b'{"a": ' + b"9" * 5000 + b"}", JSON, "64 bits"),
    (b"a: 99999999999999999999999", YAML, "64 bits"),
    (b'{"a": 1e400}', JSON, "64-bit float"),
    (b'{"a": NaN}', JSON, "NaN"),
    (b'{"a": -Infinity}', JSON, "Infinity"),
    (b"a: .inf", YAML, "Infinity"),
    (b"a: [1", JSON, "not valid JSON"),
])
def test_values_json_cannot_carry_are_refused(raw, content_type, words):
    error = refusal(raw, content_type)
    assert error.code == 400 and words in error.message


def test_int64_bounds_are_accepted():
    assert decode_body(b'{"a": 9223372036854775807, "b": -9223372036854775808}', JSON) == {
        "a": 2**63 - 1, "b": -(2**63)}


def test_body_size_is_capped():
    error = refusal(b" " * (MAX_BODY_BYTES + 1))
    assert error.code == 413 and str(MAX_BODY_BYTES) in error.message


# --- Status bodies ------------------------------------------------------------------------------------


def status_bytes(error: errors.APIError) -> bytes:
    return encode(error.to_status())


def test_not_found_status_matches_upstream_bytes():
    assert status_bytes(errors.not_found("pods", "x")) == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \\"x\\" not found",'
        b'"reason":"NotFound","details":{"name":"x","kind":"pods"},"code":404}\n')
    assert status_bytes(errors.not_found("deployments", "web", "apps")) == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b'"message":"deployments.apps \\"web\\" not found","reason":"NotFound",'
        b'"details":{"name":"web","group":"apps","kind":"deployments"},"code":404}\n')


def test_invalid_and_unauthorized_status_match_upstream_bytes():
    invalid = errors.Invalid.for_object("Pod", "x", [{"reason": "FieldValueRequired", "message": "Required value",
                                                      "field": "spec.containers[0].image"}])
    assert status_bytes(invalid) == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b'"message":"Pod \\"x\\" is invalid: spec.containers[0].image: Required value","reason":"Invalid",'
        b'"details":{"name":"x","kind":"Pod","causes":[{"reason":"FieldValueRequired","message":"Required value",'
        b'"field":"spec.containers[0].image"}]},"code":422}\n')
    assert status_bytes(errors.Unauthorized("Unauthorized")) == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized",'
        b'"reason":"Unauthorized","code":401}\n')


def test_encoding_escapes_as_go_does():
    assert encode({"m": "<a & b> \u2028 é"}) == '{"m":"\\u003ca \\u0026 b\\u003e \\u2028 é"}\n'.encode()


# --- Accept -------------------------------------------------------------------------------------------

METADATA_LIST = "application/json;as=PartialObjectMetadataList;v={};g=meta.k8s.io"


def test_accept_alternatives_are_tried_in_order_of_preference():
    assert [r.media_type for r in parse_accept("a/b;q=0.5, c/d, e/f;q=0, g/h")] == ["c/d", "g/h", "a/b"]
    table_first = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    assert negotiate(table_first, "list") == Rendering("Table", "v1")
    assert negotiate("application/json;as=Table;v=v1;g=meta.k8s.io;q=0.5,application/json", "list") == Rendering()
    assert negotiate("", "object") == Rendering()
    assert negotiate("application/vnd.kubernetes.protobuf,application/json", "object") == Rendering()


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_metadata_renderings(version):
    assert negotiate(METADATA_LIST.format(version), "list") == Rendering("PartialObjectMetadata", version)
    single = f"application/json;as=PartialObjectMetadata;v={version};g=meta.k8s.io"
    assert negotiate(single, "object") == Rendering("PartialObjectMetadata", version)
    assert negotiate(single, "watch") == Rendering("PartialObjectMetadata", version)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {}}
    assert partial_list([pod], "7", version) == {
        "kind": "PartialObjectMetadataList", "apiVersion": f"meta.k8s.io/{version}",
        "metadata": {"resourceVersion": "7"},
        "items": [{"kind": "PartialObjectMetadata", "apiVersion": f"meta.k8s.io/{version}",
                   "metadata": {"name": "x"}}]}
    assert partial_object(pod, version)["metadata"] == {"name": "x"}


@pytest.mark.parametrize(("accept", "shape"), [
    (METADATA_LIST.format("v1"), "object"),
    ("application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io", "list"),
    ("application/json;as=Table;v=v2;g=meta.k8s.io", "list"),
    ("application/json;as=Table;v=v1;g=example.com", "list"),
    ("text/html", "object"),
])
def test_nothing_servable_is_not_acceptable(accept, shape):
    with pytest.raises(errors.NotAcceptable) as caught:
        negotiate(accept, shape)
    status = caught.value.to_status()
    assert status["code"] == 406 and status["reason"] == "NotAcceptable"
    assert json.loads(encode(status))["message"].startswith("only the following media types are accepted: ")


def test_warning_header_quotes_as_upstream_and_stays_one_header_line():
    assert warning_header(['unknown field "spec.x"']) == '299 - "unknown field \\"spec.x\\""'
    assert warning_header(['unknown field "a\\b\nc"', "x"]) == '299 - "unknown field \\"a\\\\b c\\"", 299 - "x"'
    assert warning_header(["é"]).encode("latin-1") == '299 - "é"'.encode()
