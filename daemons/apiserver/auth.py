"""Bearer-token authentication from a Kubernetes static token file."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from daemons.api.errors import MiniK8sError

# Paths anyone may read, as on a Kubernetes apiserver.
PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/livez", "/version"})


class TokenFileError(MiniK8sError):
    """The token file has a line that cannot be a token entry."""


@dataclass(frozen=True)
class User:
    name: str
    uid: str
    groups: tuple[str, ...] = ()


ANONYMOUS = User("system:anonymous", "", ("system:unauthenticated",))


def load_token_file(path: str | Path) -> dict[str, User]:
    """Parse ``token,user,uid,"group1,group2"`` lines; blank lines and ``#`` comments are skipped."""
    users: dict[str, User] = {}
    with open(path, newline="") as handle:
        for number, row in enumerate(csv.reader(handle), start=1):
            if not row or not row[0].strip() or row[0].lstrip().startswith("#"):
                continue
            if len(row) < 3:
                raise TokenFileError(f"{path}:{number}: expected token,user,uid[,\"groups\"], got {len(row)} fields")
            token, name, uid = (field.strip() for field in row[:3])
            if not token or not name:
                raise TokenFileError(f"{path}:{number}: token and user name must not be empty")
            groups = tuple(group.strip() for group in row[3].split(",") if group.strip()) if len(row) > 3 else ()
            if token in users:
                raise TokenFileError(f"{path}:{number}: duplicate token")
            users[token] = User(name, uid, ("system:authenticated", *groups))
    return users


class Authenticator:
    """Maps an ``Authorization`` header to a user; without a token file everyone is admitted."""

    def __init__(self, tokens: dict[str, User] | None) -> None:
        self.tokens = tokens

    def authenticate(self, path: str, authorization: str | None) -> User | None:
        """The caller, ``ANONYMOUS`` for open paths or open servers, None when the request must get 401."""
        if self.tokens is None:
            return ANONYMOUS
        scheme, _, token = (authorization or "").partition(" ")
        user = self.tokens.get(token.strip()) if scheme.lower() == "bearer" else None
        if user is not None:
            return user
        return ANONYMOUS if path in PUBLIC_PATHS else None
