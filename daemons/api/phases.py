"""Pod phases every component agrees on."""

from __future__ import annotations

# A pod in one of these phases runs no container again: it holds no resources and serves no traffic.
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
