"""What every settings table shares: a frozen pydantic model whose errors are ConfigErrors, a field with
its description, and the value types the keys are made of."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr, ValidationError
from pydantic.config import JsonDict
from pydantic_core import PydanticUndefined

from audit.settings.errors import from_validation_error, invalid, show


def setting(doc: str, default: Any = PydanticUndefined, *, factory: Any = None, shown: str | None = None) -> Any:
    """A field with its description, and for computed defaults how `kaudit config keys` shows them.

    No default and no factory: the key is required.
    """
    extra: JsonDict | None = None if shown is None else {"shown": shown}
    if factory is not None:
        return Field(default_factory=factory, description=doc, json_schema_extra=extra)
    return Field(default, description=doc, json_schema_extra=extra)


class FrozenValues:
    """Hashing and validated copies for frozen settings models (a pydantic BaseModel or BaseSettings)."""

    def replace(self, **changes: Any) -> Any:
        """A copy with `changes`, checked like a new object (pydantic's model_copy checks nothing)."""
        values = {name: getattr(self, name) for name in type(self).model_fields}  # type: ignore[attr-defined]
        return type(self)(**{**values, **changes})

    def __hash__(self) -> int:
        # The generated hash fails on the dict fields (client settings, thresholds): hash their items.
        values = (getattr(self, name) for name in type(self).model_fields)  # type: ignore[attr-defined]
        return hash((type(self), *(frozenset(v.items()) if isinstance(v, Mapping) else v for v in values)))


class SettingsModel(FrozenValues, BaseModel):
    """A table of the configuration: frozen, no unknown key, errors as `<key_prefix><key>: message`."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    # How this table's keys are written in errors when it is built on its own (`clusters[].name`).
    key_prefix: ClassVar[str] = ""

    def __init__(self, /, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise from_validation_error(exc, type(self), self.key_prefix) from None

    # Tells pydantic not to call this __init__ for nested tables: their errors stay in the ValidationError
    # of the outer table, with their place in it (clusters[0].name).
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]


# -- checks shared by several keys; each raises invalid(...) with the message the key gets ---------


def no_nul(path: Path) -> Path:
    if "\x00" in str(path):
        raise invalid(f"{show(path)} contains a NUL character")
    return path


def positive_seconds(value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise invalid(f"{value:g} must be a finite number of seconds > 0")
    return value


def positive(value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise invalid(f"{value:g} must be a finite number > 0")
    return value


def tcp_port(port: int) -> int:
    if not 0 < port < 65536:
        raise invalid(f"{port} is not a TCP port (1 to 65535)")
    return port


EMAIL_PATTERN = re.compile(r"^[^@\s,<>]+@[^@\s,<>]+$")


def email_address(address: str) -> str:
    if not EMAIL_PATTERN.match(address):
        raise invalid(f"{show(address)} is not an email address (name@domain)")
    return address


def compiled(key_parts: tuple[str | int, ...], pattern: str) -> re.Pattern[str]:
    """`pattern` compiled, or an error at `key_parts` (below the field) saying why not."""
    try:
        return re.compile(pattern)
    except (re.error, OverflowError, RecursionError, ValueError) as exc:
        raise invalid(f"{pattern!r} is not a valid regex: {exc}", *key_parts) from None


def regexes(patterns: tuple[str, ...]) -> tuple[str, ...]:
    for index, pattern in enumerate(patterns):
        compiled((index,), pattern)
    return patterns


# Scalars are strict: TOML's `true` is not 1, `10.0` is not an integer, "10" is not a number. A float
# key takes an integer (TOML writes `grace_s = 300`).
ConfigPath = Annotated[Path, AfterValidator(no_nul)]
Strings = tuple[StrictStr, ...]  # a TOML list of strings, held as a tuple
Regexes = Annotated[Strings, AfterValidator(regexes)]
PositiveSeconds = Annotated[StrictFloat, AfterValidator(positive_seconds)]
Positive = Annotated[StrictFloat, AfterValidator(positive)]
Port = Annotated[StrictInt, AfterValidator(tcp_port)]
EmailAddress = Annotated[StrictStr, AfterValidator(email_address)]
