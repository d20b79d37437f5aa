"""``kubectl get``: the server's Table for humans, whole objects for ``-o yaml|json``, ``kind/name`` for ``-o name``."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from cli.printers import OUTPUT_FORMATS, TableLayout, as_list, dump, tabwrite
from cli.session import CLIError, Session, kind_label, object_ref, type_and_names
from cli.verbs import Output, Selector
from daemons.api.errors import APIError, not_found
from daemons.api.resources import Resource


def get(
    ctx: typer.Context,
    args: Annotated[list[str] | None, typer.Argument(help="TYPE[,TYPE...] [NAME...] or TYPE/NAME...")] = None,
    output: Output = "",
    selector: Selector = None,
    field_selector: Annotated[str | None, typer.Option("--field-selector", help="e.g. status.phase=Running")] = None,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="After listing, print changes as they happen.")] = False,
    show_labels: Annotated[bool, typer.Option("--show-labels", help="Add a LABELS column.")] = False,
    no_headers: Annotated[bool, typer.Option("--no-headers", help="Leave out the column headers.")] = False,
    show_managed_fields: Annotated[bool, typer.Option("--show-managed-fields",
                                                      help="Keep metadata.managedFields in yaml/json.")] = False,
    ignore_not_found: Annotated[bool, typer.Option("--ignore-not-found",
                                                   help="A named object that does not exist is no error.")] = False,
) -> None:
    """Display one or many resources."""
    session: Session = ctx.obj
    if output and output not in OUTPUT_FORMATS:
        raise CLIError(f'unable to match a printer suitable for the output format "{output}", allowed formats '
                       f"are: {','.join(OUTPUT_FORMATS)}")
    groups = type_and_names(args or [])
    named = any(names for _, names in groups)
    if named and (selector or field_selector):
        raise CLIError("name cannot be provided when a selector is specified")
    if named and session.options.all_namespaces:
        raise CLIError("a resource cannot be retrieved by name across all namespaces")
    if watch and (len(groups) != 1 or output not in ("", "wide")):
        raise CLIError("watch is only supported on one resource type, with table output")
    query = {"label_selector": selector, "field_selector": field_selector,
             "all_namespaces": session.options.all_namespaces}
    if output in ("yaml", "json", "name"):
        objects = [obj for row, names in groups for obj in _objects(session, row, names, query, ignore_not_found)]
        if not show_managed_fields:
            for _, obj in objects:
                obj.get("metadata", {}).pop("managedFields", None)
        if output == "name":
            _print_lines([object_ref(row, obj["metadata"]["name"]) for row, obj in objects], session, groups)
        elif len(groups) == 1 and len(groups[0][1]) == 1 and objects:
            print(dump(objects[0][1], output))
        else:
            print(dump(as_list([obj for _, obj in objects]), output))
        return
    printed = False
    for row, names in groups:
        table = _table(session, row, names, query, ignore_not_found)
        layout = TableLayout(table.get("columnDefinitions") or [], wide=output == "wide", labels=show_labels,
                             namespace=session.options.all_namespaces and row.namespaced,
                             kind=kind_label(row) if len(groups) > 1 else None)
        lines = ([] if no_headers else [layout.header()]) + [layout.row(item) for item in table.get("rows") or []]
        if table.get("rows"):
            if printed:
                print()
            print("\n".join(tabwrite(lines, 3)), flush=True)
            printed = True
        if watch:
            _watch(session, row, layout, lines, table, query)
    if not printed and not watch:
        _print_lines([], session, groups)


def _print_lines(lines: list[str], session: Session, groups: list[tuple[Resource, list[str]]]) -> None:
    """Print the lines, or kubectl's "No resources found" on stderr when there are none."""
    if lines:
        print("\n".join(lines))
    elif not any(names for _, names in groups):
        scoped = not session.options.all_namespaces and any(row.namespaced for row, _ in groups)
        print(f"No resources found in {session.namespace} namespace." if scoped else "No resources found",
              file=sys.stderr)


def _objects(session: Session, row: Resource, names: list[str],
             query: dict[str, Any], ignore_not_found: bool = False) -> list[tuple[Resource, dict[str, Any]]]:
    """The whole objects: each named one (a missing one is reported and skipped), or the filtered list."""
    if names:
        found = []
        for name in names:
            with session.each_object(ignore_not_found):
                found.append((row, session.client.get(row, name, session.namespace)))
        return found
    listed = session.client.list(row, session.namespace, **query)
    return [(row, {"apiVersion": row.api_version, "kind": row.kind, **item}) for item in listed.get("items") or []]


def _table(session: Session, row: Resource, names: list[str], query: dict[str, Any],
           ignore_not_found: bool = False) -> dict[str, Any]:
    """The server's Table of the list, or of the named objects (a missing one is reported and skipped)."""
    if not names:
        return session.client.list(row, session.namespace, table=True, **query)
    combined: dict[str, Any] = {"rows": []}
    for name in names:
        with session.each_object(ignore_not_found):
            table = session.client.list(row, session.namespace, field_selector=f"metadata.name={name}", table=True)
            if not table.get("rows"):
                raise not_found(row.plural, name, row.group)
            combined.setdefault("columnDefinitions", table.get("columnDefinitions"))
            combined["metadata"] = table.get("metadata")
            combined["rows"].extend(table["rows"])
    return combined


def _watch(session: Session, row: Resource, layout: TableLayout, lines: list[str], table: dict[str, Any],
           query: dict[str, Any]) -> None:
    """Print each change as a row aligned with the table above; the header comes with the first row if none did."""
    header_due = not table.get("rows") and bool(lines)
    version = (table.get("metadata") or {}).get("resourceVersion")
    for event in session.client.watch(row, session.namespace, resource_version=version, table=True, **query):
        if event.get("type") == "ERROR":
            status = event.get("object") or {}
            raise APIError.from_status(status.get("code") or 500, status)
        if event.get("type") == "BOOKMARK":
            continue
        for item in (event.get("object") or {}).get("rows") or []:
            new = tabwrite([*lines, layout.row(item)], 3)
            print("\n".join(new[-2:] if header_due else new[-1:]), flush=True)
            header_due = False
