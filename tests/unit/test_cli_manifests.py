"""Manifest loading: what -f accepts, and errors that name the file, document and field."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from cli.manifests import ManifestError, load

pytestmark = pytest.mark.unit

POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c, image: i}]}\n"
DEPLOYMENT = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: front, namespace: prod}\n"


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def load_error(paths: list[str], stdin: str = "") -> str:
    with pytest.raises(ManifestError) as caught:
        load(paths, io.StringIO(stdin), "apply")
    return str(caught.value)


def test_multi_document_yaml_maps_each_object_to_its_resource(tmp_path):
    path = write(tmp_path, "app.yaml", f"---\n{POD}---\n{DEPLOYMENT}---\n")
    manifests = load([path], io.StringIO(), "apply")
    assert [(m.resource.qualified_name, m.name) for m in manifests] == [("pods", "web"), ("deployments.apps", "front")]
    assert manifests[1].where == f"{path}: document 2"


def test_folder_reads_yaml_yml_json_sorted_and_not_recursively(tmp_path):
    write(tmp_path, "b.yml", POD.replace("web", "b"))
    write(tmp_path, "a.json", '{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}')
    write(tmp_path, "c.txt", POD.replace("web", "ignored"))
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", "d.yaml", POD.replace("web", "nested"))
    assert [m.name for m in load([str(tmp_path)], io.StringIO(), "apply")] == ["a", "b"]


def test_stdin_and_json_streams_and_lists():
    stdin = ('{"apiVersion": "v1", "kind": "Namespace",\n\t"metadata": {"name": "one"}}\n'
             '{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "Namespace", '
             '"metadata": {"name": "two"}}]}')
    manifests = load(["-"], io.StringIO(stdin), "create")
    assert [(m.where, m.name) for m in manifests] == [("STDIN: document 1", "one"),
                                                      ("STDIN: document 2: items[0]", "two")]


@pytest.mark.parametrize(("text", "expected"), [
    (f"{POD}---\napiVersion: v1\nmetadata: {{name: x}}\n", 'document 2: missing required field "kind"'),
    ("kind: Pod\nmetadata: {name: x}\n", 'document 1: missing required field "apiVersion"'),
    ("apiVersion: v1\nkind: Pod\nmetadata: {labels: {a: b}}\n", 'document 1: missing required field "metadata.name"'),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: 7}\n", 'field "metadata.name" must be a string, got int'),
    ("apiVersion: v1\nkind: Pod\nmetadata: {name: x, labels: {v: 1}}\n",
     'field "metadata.labels.v" must be a string, got int'),
    ("apiVersion: v1\nkind: Pod\nmetadata: [x]\n", 'field "metadata" must be an object, got list'),
    ("- just\n- a list\n", "document 1: expected an object"),
    (f"{POD}---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n spec: {{}}\n",
     "document 2: yaml: line 10, column 2: expected <block end>"),
])
def test_errors_name_file_document_and_field(tmp_path, text, expected):
    path = write(tmp_path, "app.yaml", text)
    message = load_error([path])
    assert message.startswith(f"{path}: document ")
    assert expected in message


def test_json_syntax_error_has_line_and_column(tmp_path):
    path = write(tmp_path, "pod.json", '{"apiVersion": "v1",\n "kind": }')
    assert load_error([path]) == f"{path}: document 1: json: line 2, column 10: Expecting value"


def test_unknown_kind_is_kubectls_mapping_error(tmp_path):
    path = write(tmp_path, "foo.yaml", "apiVersion: v1\nkind: Foo\nmetadata: {name: x}\n")
    assert load_error([path]) == (f'resource mapping not found for name: "x" namespace: "" from "{path}": '
                                  'no matches for kind "Foo" in version "v1"')


def test_missing_path_empty_input_and_no_f():
    assert load_error(["/nonexistent/app.yaml"]) == 'the path "/nonexistent/app.yaml" does not exist'
    assert load_error(["-"], "---\n") == "no objects passed to apply"
    assert load_error([]) == "must specify -f FILENAME"
