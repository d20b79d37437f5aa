"""The apiserver's request and response edges: hostile bodies refused with the limit they broke while other
requests keep being served, Status bodies as upstream writes them, and Accept negotiation."""

import json
import ssl
import threading

import httpx
import pytest

from daemons.apiserver.decoding import MAX_BODY_BYTES, MAX_DEPTH

ALIAS_BOMB = ('a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "\n".join(
    f'{name}: &{name} [{", ".join([f"*{previous}"] * 9)}]' for previous, name in zip("abcdefgh", "bcdefghi",
                                                                                       strict=True)) + "\n").encode()
JSON = {"Content-Type": "application/json"}
YAML = {"Content-Type": "application/yaml"}


@pytest.fixture
def http(apiserver):
    with httpx.Client(base_url=apiserver.url, verify=ssl.create_default_context(cafile=apiserver.ca_file),
                      headers={"Authorization": f"Bearer {apiserver.admin_token}"}, timeout=60) as client:
        yield client


def configmap(name, data=None):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data or {"k": "v"}}


@pytest.mark.parametrize(("body", "headers", "code", "words"), [
    (ALIAS_BOMB, YAML, 400, "YAML aliases are expanded"),
    (b"[" * 100_000 + b"]" * 100_000, JSON, 400, f"limit of {MAX_DEPTH} levels"),
    (b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","name":"b"}}', JSON, 400,
     'duplicate key "name"'),
    (b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"\xff"}}', JSON, 400, "not valid UTF-8"),
    (b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":' + b"9" * 400 + b"}}", JSON, 400,
     "64 bits"),
    (b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"x":NaN}', JSON, 400, "NaN"),
    (b" " * (MAX_BODY_BYTES + 1), JSON, 413, str(MAX_BODY_BYTES)),
], ids=["alias-bomb", "deep-json", "duplicate-key", "invalid-utf8", "huge-number", "nan", "too-large"])
def test_hostile_create_bodies_get_the_limit_they_broke(http, namespace, body, headers, code, words):
    answer = http.post(f"/api/v1/namespaces/{namespace}/configmaps", content=body, headers=headers)
    assert answer.status_code == code, answer.text
    status = answer.json()
    assert status["kind"] == "Status" and status["code"] == code and words in status["message"]
    assert http.get(f"/api/v1/namespaces/{namespace}/configmaps").json()["items"] == []


def test_an_oversized_body_without_a_length_is_refused(http, namespace):
    def chunks():
        for _ in range(MAX_BODY_BYTES // 65536 + 2):
            yield b" " * 65536

    answer = http.post(f"/api/v1/namespaces/{namespace}/configmaps", content=chunks(), headers=JSON)
    assert answer.status_code == 413 and str(MAX_BODY_BYTES) in answer.json()["message"]


def test_hostile_patches_are_refused(http, namespace):
    assert http.post(f"/api/v1/namespaces/{namespace}/configmaps", json=configmap("cm")).status_code == 201
    path = f"/api/v1/namespaces/{namespace}/configmaps/cm"
    bomb = http.patch(path, content=ALIAS_BOMB, headers={"Content-Type": "application/apply-patch+yaml"},
                      params={"fieldManager": "test"})
    assert bomb.status_code == 400 and "YAML aliases" in bomb.json()["message"]
    duplicate = http.patch(path, content=b'{"data":{"k":"1","k":"2"}}',
                           headers={"Content-Type": "application/merge-patch+json"})
    assert duplicate.status_code == 400 and 'duplicate key "k"' in duplicate.json()["message"]
    deep = http.patch(path, content=b"[" * 100_000 + b"]" * 100_000,
                      headers={"Content-Type": "application/json-patch+json"})
    assert deep.status_code == 400
    assert http.get(path).json()["data"] == {"k": "v"}


def test_a_get_is_answered_while_a_large_hostile_body_is_being_decoded(http, apiserver, namespace):
    """A body near the size limit, streamed without a length, decoded slowly and refused at its last key."""
    line = b"  k%07d: value\n"
    count = (MAX_BODY_BYTES - 1000) // len(line % 0)
    body = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata:\n" + b"".join(
        line % index for index in range(count)) + line % 0
    sent = threading.Event()
    answers = {}

    def chunks():
        for start in range(0, len(body), 65536):
            yield body[start:start + 65536]
        sent.set()

    def post():
        with httpx.Client(verify=ssl.create_default_context(cafile=apiserver.ca_file), timeout=120,
                          headers={"Authorization": f"Bearer {apiserver.admin_token}"}) as poster:
            answers["post"] = poster.post(f"{apiserver.url}/api/v1/namespaces/{namespace}/configmaps",
                                          content=chunks(), headers=YAML)

    poster = threading.Thread(target=post)
    poster.start()
    try:
        assert sent.wait(120), "the large body was never sent"
        assert http.get(f"/api/v1/namespaces/{namespace}").status_code == 200
    finally:
        poster.join(180)
    assert answers["post"].status_code == 400
    assert 'duplicate key "k0000000"' in answers["post"].json()["message"]


# --- Status bodies ------------------------------------------------------------------------------------


def test_status_bodies_are_upstreams_bytes(http, apiserver, namespace):
    missing = http.get(f"/api/v1/namespaces/{namespace}/pods/x")
    assert missing.status_code == 404
    assert missing.content == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \\"x\\" not found",'
        b'"reason":"NotFound","details":{"name":"x","kind":"pods"},"code":404}\n')
    assert missing.headers["content-type"] == "application/json"
    anonymous = httpx.get(f"{apiserver.url}/api/v1/pods", verify=ssl.create_default_context(cafile=apiserver.ca_file))
    assert anonymous.content == (b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
                                 b'"message":"Unauthorized","reason":"Unauthorized","code":401}\n')


# --- Accept negotiation -------------------------------------------------------------------------------

METADATA = "application/json;as=PartialObjectMetadata{};v={};g=meta.k8s.io"


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_metadata_only_answers(http, namespace, version):
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    for name in ("one", "two"):
        assert http.post(path, json=configmap(name, {"secret": "shh"})).status_code == 201
    listed = http.get(path, headers={"Accept": METADATA.format("List", version)})
    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert (body["kind"], body["apiVersion"]) == ("PartialObjectMetadataList", f"meta.k8s.io/{version}")
    assert int(body["metadata"]["resourceVersion"]) > 0
    assert [set(item) for item in body["items"]] == [{"apiVersion", "kind", "metadata"}] * 2
    assert {item["metadata"]["name"] for item in body["items"]} == {"one", "two"}
    assert {item["kind"] for item in body["items"]} == {"PartialObjectMetadata"}
    events = []
    with http.stream("GET", path, params={"watch": "1", "timeoutSeconds": "30"},
                     headers={"Accept": METADATA.format("", version)}) as watched:
        for line in watched.iter_lines():
            events.append(json.loads(line))
            if len(events) == 2:
                break
    assert {event["object"]["metadata"]["name"] for event in events} == {"one", "two"}
    assert {event["object"]["kind"] for event in events} == {"PartialObjectMetadata"}
    assert all(set(event["object"]) == {"apiVersion", "kind", "metadata"} for event in events)
    got = http.get(f"{path}/one", headers={"Accept": METADATA.format("", version)}).json()
    assert set(got) == {"apiVersion", "kind", "metadata"} and got["kind"] == "PartialObjectMetadata"
    assert got["apiVersion"] == f"meta.k8s.io/{version}" and got["metadata"]["name"] == "one"


def test_accept_picks_the_first_servable_alternative_or_answers_406(http, namespace):
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    assert http.post(path, json=configmap("one")).status_code == 201
    alternatives = f"application/json;as=Unknown;v=v1;g=meta.k8s.io,{METADATA.format('List', 'v1')},application/json"
    assert http.get(path, headers={"Accept": alternatives}).json()["kind"] == "PartialObjectMetadataList"
    table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    assert http.get(path, headers={"Accept": table}).json()["kind"] == "Table"
    assert http.get(f"{path}/one", headers={"Accept": "application/json"}).json()["data"] == {"k": "v"}
    refused = http.get(path, headers={"Accept": METADATA.format("", "v1")})
    assert refused.status_code == 406
    assert refused.json()["reason"] == "NotAcceptable"
    assert http.get(f"{path}/one", headers={"Accept": "text/html"}).status_code == 406
