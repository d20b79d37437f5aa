"""Loading ``-f`` manifests: files, folders and stdin, checked before anything is sent.

Every document is parsed and mapped to a resource row up front, so a mistake in
the third document of a file creates nothing, and the error names the file, the
document and the field.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

from cli.session import CLIError
from daemons.api import resources
from daemons.api.resources import Resource

SUFFIXES = (".yaml", ".yml", ".json")
_SPACE = re.compile(r"\s*")


class ManifestError(CLIError):
    """A manifest that cannot be read, parsed or mapped to a kind."""


@dataclass
class Manifest:
    where: str  # "app.yaml: document 2", for messages
    body: dict[str, Any]
    resource: Resource

    @property
    def name(self) -> str:
        return self.body["metadata"].get("name") or ""


def load(paths: list[str], stdin: TextIO, verb: str) -> list[Manifest]:
    """Every object in the files, folders (not recursive) and ``-`` (stdin) given to ``-f``."""
    if not paths:
        raise ManifestError("must specify -f FILENAME")
    manifests = [manifest for path in paths for source, text in _read(path, stdin)
                 for manifest in parse(source, text)]
    if not manifests:
        raise ManifestError(f"no objects passed to {verb}")
    return manifests


def _read(path: str, stdin: TextIO) -> list[tuple[str, str]]:
    if path == "-":
        return [("STDIN", stdin.read())]
    location = Path(path)
    if location.is_dir():
        files = sorted(child for child in location.iterdir() if child.is_file() and child.suffix in SUFFIXES)
    elif location.exists():
        files = [location]
    else:
        raise ManifestError(f'the path "{path}" does not exist')
    try:
        return [(str(file), file.read_text()) for file in files]
    except (OSError, UnicodeDecodeError) as error:
        raise ManifestError(f"{path}: {error}") from None


def parse(source: str, text: str) -> list[Manifest]:
    """The objects in one file's text: a YAML stream, or JSON objects when it starts with ``{`` (as kubectl sniffs)."""
    manifests: list[Manifest] = []
    for index, document in enumerate(_documents(source, text), start=1):
        where = f"{source}: document {index}"
        if document is None:
            continue
        if isinstance(document, dict) and document.get("kind") == "List" and "items" in document:
            items = _expect(document["items"], list, "items", where)
            manifests.extend(_check(source, f"{where}: items[{i}]", item) for i, item in enumerate(items))
        else:
            manifests.append(_check(source, where, document))
    return manifests


def _documents(source: str, text: str) -> list[Any]:
    if text.lstrip().startswith("{"):
        decoder, documents = json.JSONDecoder(), []
        position = _SPACE.match(text).end()
        while position < len(text):
            try:
                document, position = decoder.raw_decode(text, position)
            except json.JSONDecodeError as error:
                raise ManifestError(f"{source}: document {len(documents) + 1}: json: line {error.lineno}, "
                                    f"column {error.colno}: {error.msg}") from None
            documents.append(document)
            position = _SPACE.match(text, position).end()
        return documents
    documents = []
    stream = yaml.safe_load_all(text)
    while True:
        try:
            documents.append(next(stream))
        except StopIteration:
            return documents
        except yaml.YAMLError as error:
            raise ManifestError(f"{source}: document {len(documents) + 1}: {_yaml_problem(error)}") from None


def _yaml_problem(error: yaml.YAMLError) -> str:
    if not isinstance(error, yaml.MarkedYAMLError) or error.problem_mark is None:
        return f"yaml: {error}"
    mark = error.problem_mark
    context = f" ({error.context})" if error.context else ""
    return f"yaml: line {mark.line + 1}, column {mark.column + 1}: {error.problem}{context}"


def _expect(value: Any, kind: type, field: str, where: str) -> Any:
    names = {dict: "an object", list: "a list", str: "a string"}
    if not isinstance(value, kind):
        got = "null" if value is None else type(value).__name__
        raise ManifestError(f'{where}: field "{field}" must be {names[kind]}, got {got}')
    return value


def _check(source: str, where: str, document: Any) -> Manifest:
    if not isinstance(document, dict):
        raise ManifestError(f"{where}: expected an object (a mapping of fields), got {type(document).__name__}")
    for field in ("apiVersion", "kind"):
        if not document.get(field):
            raise ManifestError(f'{where}: missing required field "{field}"')
        _expect(document[field], str, field, where)
    metadata = _expect(document.get("metadata"), dict, "metadata", where) if "metadata" in document else {}
    if not metadata.get("name") and not metadata.get("generateName"):
        raise ManifestError(f'{where}: missing required field "metadata.name"')
    for field in ("name", "generateName", "namespace"):
        if field in metadata:
            _expect(metadata[field], str, f"metadata.{field}", where)
    for field in ("labels", "annotations"):
        for key, value in (_expect(metadata.get(field) or {}, dict, f"metadata.{field}", where)).items():
            _expect(value, str, f"metadata.{field}.{key}", where)
    resource = resources.by_kind(document["apiVersion"], document["kind"])
    if resource is None:
        raise ManifestError(
            f'resource mapping not found for name: "{metadata.get("name", "")}" namespace: '
            f'"{metadata.get("namespace", "")}" from "{source}": no matches for kind "{document["kind"]}" in version '
            f'"{document["apiVersion"]}"'
        )
    document["metadata"] = metadata
    return Manifest(where=where, body=document, resource=resource)
