"""Configuration errors as one line, `key: message`, the key written as in the file (`clusters[0].name`).

Pydantic reports a ValidationError listing every problem in its own words; this turns the most useful
one into a ConfigError that names the key, says what was expected and shows the value (never a
secret's). Validators raise `invalid(text, *at)`: `text` is the message, `at` the key parts below the
field being validated (a client setting, a list index).
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

from audit.contract.errors import ConfigError

# Keys whose values are credentials: librdkafka passwords, secrets, private keys, OAuth config; SMTP and UI
# passwords. An error about one says the value's type, never the value.
SECRET_KEY_PATTERN = re.compile(r"password|secret|\.key\.pem$|^sasl\.oauthbearer\.config$", re.IGNORECASE)

_EXPECTED = {
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "string_type": "a string",
    "path_type": "a path (string)",
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
    "tuple_type": "a list of strings",
    "list_type": "a list of strings",
}
# A typo is the likeliest mistake: report it first, then a missing key, then a bad value.
_RANK = {"extra_forbidden": 0, "invalid_key": 0, "missing": 1}
# Follow-ups of an earlier error on another field, not problems of their own.
_IGNORED = {"default_factory_not_called"}


def config_error(key: str, text: str) -> ConfigError:
    """A ConfigError `key: text` that remembers its key, so callers can say where the value came from."""
    exc = ConfigError(f"{key}: {text}")
    exc.key = key  # type: ignore[attr-defined]
    exc.text = text  # type: ignore[attr-defined]
    return exc


def invalid(text: str, *at: str | int) -> PydanticCustomError:
    """The error a validator raises: `text` about the value at `at` below the field validated."""
    return PydanticCustomError("kaudit", "{text}", {"text": text, "at": at})


def show(value: Any) -> str:
    """A value as an error message shows it: repr, shortened."""
    try:
        text = repr(str(value) if hasattr(value, "__fspath__") else value)
    except RecursionError:
        return f"a {type(value).__name__} nested too deeply"
    return text if len(text) <= 60 else text[:57] + "..."


def key_of(parts: Iterable[str | int], prefix: str = "") -> str:
    """("clusters", 0, "name") as `clusters[0].name`, after `prefix` (how a model's keys appear alone)."""
    parts = tuple(parts)
    if not parts:
        return prefix.rstrip(".") or "config"
    key = prefix
    for part in parts:
        if isinstance(part, int) and key:
            key += f"[{part}]"
        else:
            key += f".{part}" if key and not key.endswith(".") else str(part)
    return key


def from_validation_error(exc: ValidationError, model: type[BaseModel], prefix: str = "") -> ConfigError:
    """The first of pydantic's errors, typos first, as a ConfigError keyed like the file."""
    errors = [error for error in exc.errors(include_url=False) if error["type"] not in _IGNORED]
    error = min(errors, key=_priority) if errors else exc.errors()[0]
    parts = (*error["loc"], *error.get("ctx", {}).get("at", ()))
    if error["type"] == "invalid_key":  # a table's key that is not a string, not a list index
        parts = (*parts[:-1], str(parts[-1]))
    return config_error(key_of(parts, prefix), _message(error, model, prefix))


def _priority(error: ErrorDetails) -> tuple[int, int]:
    """Typos first, the outermost first; then missing keys; then bad values in the order of the keys."""
    rank = _RANK.get(error["type"], 2)
    return rank, len(error["loc"]) if rank == 0 else 0


def _message(error: ErrorDetails, model: type[BaseModel], prefix: str) -> str:
    kind, loc = error["type"], error["loc"]
    if kind == "kaudit":
        return error["ctx"]["text"]
    if kind in ("extra_forbidden", "invalid_key"):
        return f"unknown key ({_unknown_key_hint(str(loc[-1]), _model_at(model, loc[:-1]))})"
    if kind == "missing":
        return "missing (required)"
    if kind in _EXPECTED:
        return f"expected {_expected(kind, model, loc, prefix)}, got {_shown_input(error)}"
    return f"{error['msg']} (got {_shown_input(error)})"


def _shown_input(error: ErrorDetails) -> str:
    last = error["loc"][-1] if error["loc"] else ""
    value = error["input"]
    if isinstance(last, str) and SECRET_KEY_PATTERN.search(last):
        return f"a {type(value).__name__}"
    return show(value)


def _expected(kind: str, model: type[BaseModel], loc: tuple[str | int, ...], prefix: str) -> str:
    """What a key holds: a list of tables for [[clusters]] and [[alerts.routes]]."""
    if kind in ("tuple_type", "list_type") and _model_at(model, loc) is not None:
        return f"a list of tables ([[{key_of((part for part in loc if isinstance(part, str)), prefix)}]])"
    return _EXPECTED[kind]


def _unknown_key_hint(key: str, model: type[BaseModel] | None) -> str:
    known = list(model.model_fields) if model else []
    close = difflib.get_close_matches(key, known, n=1)
    return f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"


def _model_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The settings model that holds the keys at `loc` (list indices skipped), or None."""
    current: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, int):
            continue
        field = current.model_fields.get(part) if current else None
        if field is None:
            return None
        current = _model_in(field.annotation)
    return current


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model class in `Model` or `tuple[Model, ...]`, else None."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None
