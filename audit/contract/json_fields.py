"""Reading the fields of a decoded JSON object, as the audit record's parser does: each value's type checked,
times read as UTC ISO-8601, a key given twice refused, and every refusal an `InvalidField` whose text names
the field, so the reason a record was refused says where it went wrong."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from audit.contract.windows import to_ms


class InvalidField(Exception):
    """A reason to refuse a record, raised while reading fields and turned into `parse`'s answer."""


def field_value(
    data: Mapping[str, Any], key: str, kinds: type | tuple[type, ...], *, required: bool = True, default: Any = None
) -> Any:
    """`data[key]` when it is one of `kinds` (a boolean only where `bool` is named); `default` when it is
    missing or null and not `required`."""
    if key not in data or data[key] is None:
        if required:
            raise InvalidField(f"{key}: missing")
        return default
    value = data[key]
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise InvalidField(f"{key}: {value!r} is a boolean, not {_type_name(kinds)}")
    if not isinstance(value, kinds):
        raise InvalidField(f"{key}: {short_repr(value)} is not {_type_name(kinds)}")
    return value


def _type_name(kinds: type | tuple[type, ...]) -> str:
    names = {int: "an integer", str: "a string", dict: "an object", list: "a list", float: "a number"}
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    return " or ".join(names.get(kind, kind.__name__) for kind in kinds)


def short_repr(value: Any) -> str:
    """`value` as a reason quotes it: its repr, cut to 60 characters."""
    try:
        text = repr(value)
    except RecursionError:
        return f"a {type(value).__name__} nested too deeply"
    return text if len(text) <= 60 else text[:57] + "..."


def time_field(data: Mapping[str, Any], key: str, *, required: bool = True) -> int | None:
    """`data[key]`, a UTC ISO-8601 time, as epoch milliseconds; None when missing and not `required`."""
    text = field_value(data, key, str, required=required)
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidField(f"{key}: {short_repr(text)} is not an ISO-8601 time") from None
    offset = moment.utcoffset()
    if offset is None or offset.total_seconds() != 0:
        raise InvalidField(f"{key}: {short_repr(text)} is not UTC (end it with Z)")
    return to_ms(moment)


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict; a key given twice is refused (which one would count?)."""
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                name = short_repr(key)[1:-1]
                if name and ":" not in name:
                    raise InvalidField(f"{name}: the key appears twice in one object")
                # A key that is empty or holds a colon (":" alone, say) cannot lead the reason.
                raise InvalidField(f"duplicate key: {short_repr(key)} appears twice in one object")
            seen.add(key)
    return data
