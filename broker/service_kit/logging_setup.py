"""Logging for Samsa's processes: human-readable text or one JSON object per line.

Extra fields passed with ``extra={...}`` (e.g. ``event``, ``port``) appear as
JSON keys, so log shippers can index them.
"""
from __future__ import annotations

import json
import logging
import sys
import time

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                  + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = value
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def setup_logging(level: str = "INFO", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(
            "%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


class RateLimitedLog:
    """Logs at most ``burst`` messages per key every ``interval`` seconds and
    counts the rest; the next message of a key after its window says how many
    were suppressed. For warnings a peer can trigger at will (malformed
    frames): one line each would let a client fill the disk."""

    def __init__(self, logger: logging.Logger, burst: int = 10, interval: float = 60.0,
                 clock=time.monotonic) -> None:
        self.logger = logger
        self.burst = burst
        self.interval = interval
        self.clock = clock
        self._windows: dict[str, list] = {}    # key -> [window start, logged, suppressed]

    def log(self, level: int, key: str, msg: str, *args) -> None:
        now = self.clock()
        window = self._windows.get(key)
        if window is None or now - window[0] >= self.interval:
            if window is not None and window[2]:
                self.logger.log(level, "%d more '%s' messages were suppressed in %.0f s",
                                window[2], key, now - window[0])
            if len(self._windows) > 1000:         # keys come from a fixed set; stay bounded
                self._windows.clear()
            window = self._windows[key] = [now, 0, 0]
        if window[1] < self.burst:
            window[1] += 1
            self.logger.log(level, msg, *args)
        else:
            window[2] += 1
