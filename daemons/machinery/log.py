"""One logging format for every daemon, so that interleaved logs of a node read alike."""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s.%(msecs)03d %(levelname)-7s %(name)s: %(message)s"
DATE_FORMAT = "%Y-%m-%dT%H:%M:%S"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# Libraries that narrate every request or connection attempt; our own loggers say what matters.
CHATTY = {"httpx": logging.WARNING, "httpcore": logging.WARNING, "pika": logging.CRITICAL,
          "aio_pika": logging.WARNING, "aiormq": logging.WARNING}


def setup_logging(level: str = "INFO") -> None:
    """Configure the root logger to write ``time level logger: message`` lines to stderr.

    At DEBUG the chatty libraries are left as loud as they want to be.
    """
    name = level.upper()
    if name not in LEVELS:
        raise ValueError(f"unknown log level {level!r} (expected one of {', '.join(LEVELS)})")
    logging.basicConfig(level=name, format=FORMAT, datefmt=DATE_FORMAT, force=True)
    for logger_name, quiet in CHATTY.items():
        logging.getLogger(logger_name).setLevel(logging.NOTSET if name == "DEBUG" else quiet)
