"""Structured log lines: `logging` with fields (cluster, topic, partition, offset, ...) passed as `extra`.

Two formats: `kv` (human-readable `key=value` after the message, the default on a terminal) and
`json` (one object a line, for log shippers). Chosen by KAUDIT_LOG_FORMAT, level by KAUDIT_LOG_LEVEL.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

# Attributes every LogRecord has; anything else on a record came in through `extra`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


def record_fields(record: logging.LogRecord) -> dict:
    return {key: value for key, value in vars(record).items() if key not in _STANDARD}


def _timestamp(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{key}={value}" for key, value in record_fields(record).items())
        line = f"{_timestamp(record)} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if fields:
            line += f"  {fields}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        payload.update(record_fields(record))
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


class StderrHandler(logging.StreamHandler):
    """Writes to the `sys.stderr` of the moment, as logging's last resort does: a CLI run inside a test must not
    leave the root logger holding a stream the test's capture has since closed."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def setup_logging(level: str | None = None, fmt: str | None = None) -> None:
    """Configure the root logger once per process, to stderr."""
    level = (level or os.environ.get("KAUDIT_LOG_LEVEL", "INFO")).upper()
    fmt = fmt or os.environ.get("KAUDIT_LOG_FORMAT", "kv")
    handler = StderrHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("py4j", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
