"""kafka-audit's librdkafka interceptor plugin (native/plugin/), from Python: where it is, the configuration
that loads it into a librdkafka client, and what a client can ask it.

Any librdkafka client becomes an audited producer with two settings, `plugin.library.paths` (first) and
`kaudit.cluster`; the plugin counts each message once the broker acknowledged it or it failed for good,
and writes the producer tier's count records into the audit topic itself. A client with a `transactional.id`
that does not tell the plugin of its transactions (`transaction`) gets count records marked `unknown`: an
interceptor sees no commit and no abort.
"""

from __future__ import annotations

import ctypes
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from audit.contract.errors import KafkaClientError

PLUGIN_PATH = Path(__file__).resolve().parent / "kaudit_plugin.so"
DEFAULT_FLUSH_INTERVAL_MS = 10_000
# kaudit.tally.max.entries: the (topic, window) entries a producer holds while the audit topic takes no records; an
# entry with latencies is about 7 KB, so this bounds an outage to some 70 MB whatever its length.
DEFAULT_MAX_ENTRIES = 10_000
MOST_MAX_ENTRIES = 1_000_000  # the largest bound either client accepts (Java's AuditSettings too)
_library: ctypes.CDLL | None = None
_library_lock = threading.Lock()


def plugin_path() -> str:
    """The built plugin's path; a clear error when it was not built."""
    if not PLUGIN_PATH.exists():
        raise KafkaClientError(f"{PLUGIN_PATH} is not built: run `make native` (part of `make setup`)")
    return str(PLUGIN_PATH)


def plugin_config(
    *,
    cluster: str | None = None,
    audit_topic: str | None = None,
    window_minutes: int | None = None,
    flush_interval_ms: int | None = None,
    service: str | None = None,
    host: str | None = None,
    instance_id: str | None = None,
    digest_exclude: Sequence[str] = (),
    max_entries: int | None = None,
    close_timeout_ms: int | None = None,
) -> dict[str, str]:
    """The librdkafka settings that load the plugin with these kaudit.* keys (those given), path first."""
    keys = {
        "kaudit.cluster": cluster,
        "kaudit.audit.topic": audit_topic,
        "kaudit.window.minutes": window_minutes,
        "kaudit.flush.interval.ms": flush_interval_ms,
        "kaudit.service": service,
        "kaudit.host": host,
        "kaudit.instance.id": instance_id,
        "kaudit.digest.exclude": digest_exclude_regex(digest_exclude),
        "kaudit.tally.max.entries": max_entries,
        "kaudit.close.timeout.ms": close_timeout_ms,
    }
    return {
        "plugin.library.paths": plugin_path(),
        **{key: str(value) for key, value in keys.items() if value is not None},
    }


def digest_exclude_regex(patterns: Sequence[str]) -> str | None:
    """The one regex `kaudit.digest.exclude` takes for `patterns` (any may match), or None for none: the plugin
    counts a topic it matches without a content digest. The patterns are POSIX extended regexes (the settings
    check them: audit.settings.topics), which Python's `re` reads the same."""
    return "|".join(f"({pattern})" for pattern in patterns) or None


def with_plugin(config: Mapping[str, Any], **keys: Any) -> dict[str, Any]:
    """`config` with the plugin added to its plugin.library.paths (';'-separated) and the kaudit.* keys."""
    plugin = plugin_config(**keys)
    paths = [path for path in str(config.get("plugin.library.paths") or "").split(";") if path]
    if plugin["plugin.library.paths"] not in paths:
        paths.append(plugin["plugin.library.paths"])
    return {**config, **plugin, "plugin.library.paths": ";".join(paths)}


def library() -> ctypes.CDLL:
    """The plugin loaded into this process (the same copy librdkafka loads: dlopen shares it)."""
    global _library
    with _library_lock:
        if _library is None:
            loaded = ctypes.CDLL(plugin_path())
            loaded.kaudit_flush.argtypes = [ctypes.c_char_p, ctypes.c_int]
            loaded.kaudit_flush.restype = ctypes.c_longlong
            for name in ("kaudit_totals", "kaudit_held"):
                function = getattr(loaded, name)
                function.argtypes = [
                    ctypes.c_char_p,
                    ctypes.POINTER(ctypes.c_longlong),
                    ctypes.POINTER(ctypes.c_longlong),
                ]
            loaded.kaudit_backlog.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_longlong), ctypes.c_int]
            loaded.kaudit_transaction.argtypes = [ctypes.c_char_p, ctypes.c_int]
            loaded.kaudit_take_consumed.argtypes = [ctypes.c_char_p]
            loaded.kaudit_take_consumed.restype = ctypes.c_void_p
            loaded.kaudit_sample_record.argtypes = [
                ctypes.c_char_p,
                ctypes.c_longlong,
                ctypes.POINTER(ctypes.c_longlong),
                ctypes.POINTER(ctypes.c_int),
                ctypes.POINTER(ctypes.c_longlong),
                ctypes.c_int,
                ctypes.c_longlong,
                ctypes.c_longlong,
                ctypes.c_int,
            ]
            loaded.kaudit_sample_record.restype = ctypes.c_void_p
            loaded.kaudit_free.argtypes = [ctypes.c_void_p]
            loaded.kaudit_window_start.argtypes = [ctypes.c_longlong, ctypes.c_longlong]
            loaded.kaudit_window_start.restype = ctypes.c_longlong
            loaded.kaudit_hash_of.argtypes = [ctypes.c_char_p, ctypes.c_longlong, ctypes.c_char_p, ctypes.c_longlong]
            loaded.kaudit_hash_of.restype = ctypes.c_longlong
            loaded.kaudit_digest_of.argtypes = [*[ctypes.c_void_p] * 4, ctypes.c_longlong]
            loaded.kaudit_digest_of.restype = ctypes.c_longlong
            _library = loaded
        return _library


def flush(instance_id: str, timeout_s: float) -> int:
    """Emit the client's counts now and wait for the audit topic to take them: the records left undelivered."""
    left = library().kaudit_flush(instance_id.encode(), int(timeout_s * 1000))
    if left < 0:
        raise KafkaClientError(f"no client with kaudit.instance.id {instance_id!r} in this process")
    return int(left)


def totals(instance_id: str) -> tuple[int, int]:
    """(delivered, failed for good) messages of the client since it started."""
    delivered, failed = ctypes.c_longlong(), ctypes.c_longlong()
    if library().kaudit_totals(instance_id.encode(), ctypes.byref(delivered), ctypes.byref(failed)) != 0:
        raise KafkaClientError(f"no client with kaudit.instance.id {instance_id!r} in this process")
    return delivered.value, failed.value


def held(instance_id: str) -> tuple[int, int]:
    """(tally entries since the last emission, count records waiting for the audit topic) of the client."""
    entries, pending = ctypes.c_longlong(), ctypes.c_longlong()
    if library().kaudit_held(instance_id.encode(), ctypes.byref(entries), ctypes.byref(pending)) != 0:
        raise KafkaClientError(f"no client with kaudit.instance.id {instance_id!r} in this process")
    return entries.value, pending.value


@dataclass(frozen=True)
class Backlog:
    """What a producer's plugin holds and lost (native/plugin/held.c)."""

    entries: int  # (topic, window) entries of the tally, merged since the last records were made
    transaction_entries: int  # entries of the open transaction the application told of
    undelivered: int  # count records made and not yet taken by the audit topic
    lost_windows: int  # (topic, window) entries dropped at kaudit.tally.max.entries: written as unknown
    untold_transactional: bool  # a transactional.id and no word of its transactions: every count is unknown


def backlog(instance_id: str) -> Backlog:
    """What the producer client's plugin holds and lost since it started."""
    values = (ctypes.c_longlong * 5)()
    if library().kaudit_backlog(instance_id.encode(), values, 5) != 0:
        raise KafkaClientError(f"no producer with kaudit.instance.id {instance_id!r} in this process")
    entries, transaction_entries, undelivered, lost_windows, untold = values
    return Backlog(entries, transaction_entries, undelivered, lost_windows, untold_transactional=bool(untold))


TRANSACTION_EVENTS = {"begin": 0, "commit": 1, "abort": 2}


def transaction(instance_id: str, event: str) -> None:
    """Tell the producer client's plugin of its transaction: `begin` once begin_transaction returned, `commit`
    once commit_transaction returned, `abort` once abort_transaction returned."""
    if library().kaudit_transaction(instance_id.encode(), TRANSACTION_EVENTS[event]) != 0:
        raise KafkaClientError(f"no producer with kaudit.instance.id {instance_id!r} in this process")


def take_text(pointer: int | None) -> str | None:
    """The text of a malloc'd C string from the plugin, freed."""
    if not pointer:
        return None
    try:
        return ctypes.string_at(pointer).decode()
    finally:
        library().kaudit_free(pointer)


def take_consumed(instance_id: str) -> dict[str, Any]:
    """The counts of what the consumer client was handed since the last call (see native/plugin/consume.c)."""
    text = take_text(library().kaudit_take_consumed(instance_id.encode()))
    if text is None:
        raise KafkaClientError(f"no consumer with kaudit.instance.id {instance_id!r} in this process")
    return json.loads(text)


def message_hash(key: bytes | None, value: bytes | None) -> int:
    """The content digest's hash of one message as the plugin computes it (`audit.contract.digest`)."""
    return int(library().kaudit_hash_of(key, len(key or b""), value, len(value or b"")))


def digest_of(messages: list[tuple[bytes | None, bytes | None]]) -> int:
    """The content digest of (key, value) messages as the plugin computes and merges it."""
    n = len(messages)
    keys = (ctypes.c_char_p * n)(*(key for key, _ in messages))
    values = (ctypes.c_char_p * n)(*(value for _, value in messages))
    key_lens = (ctypes.c_longlong * n)(*(len(key or b"") for key, _ in messages))
    value_lens = (ctypes.c_longlong * n)(*(len(value or b"") for _, value in messages))
    return int(library().kaudit_digest_of(keys, key_lens, values, value_lens, n))
