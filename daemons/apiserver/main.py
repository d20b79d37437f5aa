"""``minik8s-apiserver``: parse settings, build the app, serve it with uvicorn."""

from __future__ import annotations

import logging

import uvicorn

from daemons.apiserver.app import create_app
from daemons.apiserver.auth import TokenFileError
from daemons.apiserver.settings import ApiServerSettings
from daemons.machinery.log import setup_logging
from daemons.machinery.settings import parse_settings

log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> None:
    settings = parse_settings(ApiServerSettings, argv, prog="minik8s-apiserver")
    setup_logging(settings.log_level)
    try:
        app = create_app(settings)
    except (OSError, TokenFileError) as error:
        raise SystemExit(f"minik8s-apiserver: {error}") from None
    scheme = "https" if settings.tls_cert_file else "http"
    log.info("serving the API on %s://%s:%s (etcd %s)", scheme, settings.bind_address, settings.secure_port,
             settings.etcd_servers)
    uvicorn.run(
        app,
        host=settings.bind_address,
        port=settings.secure_port,
        ssl_certfile=settings.tls_cert_file,
        ssl_keyfile=settings.tls_private_key_file,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=2,
    )


if __name__ == "__main__":
    main()
