"""``kubectl api-resources``: the kinds this cluster serves, from the resource table."""

from __future__ import annotations

from cli.printers import tabwrite
from daemons.api import resources


def api_resources() -> None:
    """List the resource types: name, short names, API version, whether namespaced, kind."""
    group_order = list(resources.groups())
    rows = sorted(resources.RESOURCES, key=lambda row: (group_order.index(row.group), row.plural))
    lines = ["NAME\tSHORTNAMES\tAPIVERSION\tNAMESPACED\tKIND"]
    lines += [f"{row.plural}\t{','.join(row.short_names)}\t{row.api_version}\t{str(row.namespaced).lower()}\t{row.kind}"
              for row in rows]
    print("\n".join(tabwrite(lines, 3)))
