"""Build the librdkafka plugin in place (`make native`, run by `make setup`): `python native/build.py`.

`audit/io/kaudit_plugin.so` (native/plugin/) is compiled against librdkafka's public rdkafka.h (Debian's
librdkafka-dev, installed by `make setup`) and linked to no librdkafka; xxHash (Debian's libxxhash-dev) is
compiled in from its header. Its constants come from the Python contract, written into a generated header,
so each rule is stated once. `python native/build.py --java` writes the same constants (`contract_constants`) into
the Java producer interceptor's io/kaudit/Contract.java, which is committed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "native"
PLUGIN = ROOT / "audit" / "io" / "kaudit_plugin.so"
PLUGIN_SOURCES = sorted((ROOT / "native" / "plugin").glob("*.c"))
RDKAFKA_HEADER = Path("/usr/include/librdkafka/rdkafka.h")
XXHASH_HEADER = Path("/usr/include/xxhash.h")  # compiled in (XXH_INLINE_ALL): no libxxhash to link
# The librdkafka versions the plugin is tested with: from the one its header comes from (Debian's, kcat's) up to,
# not including, the next minor release after the one the pinned confluent-kafka bundles. It refuses any other.
RDKAFKA_TESTED_BEYOND = (2, 17)
JAVA_CONTRACT = ROOT / "jvm" / "interceptor" / "src" / "main" / "java" / "io" / "kaudit" / "Contract.java"
JAVA_COMMAND = ".venv/bin/python native/build.py --java"


@dataclass(frozen=True)
class ConstantType:
    """How a constant is spelled: its C literal's suffix, its Java type and its Java literal's suffix."""

    c_suffix: str
    java_type: str
    java_suffix: str = ""


TEXT = ConstantType("", "String")
INT = ConstantType("", "int")
UINT = ConstantType("U", "int")
LONG = ConstantType("LL", "long", "L")
ULONG = ConstantType("ULL", "long", "L")


@dataclass(frozen=True)
class Constant:
    """One constant of the contract: `KAUDIT_<name>` in C, `Contract.<name>` in Java."""

    name: str
    value: int | str
    type: ConstantType
    source: str  # the Python name that states it

    def literal(self, suffix: str) -> str:
        if isinstance(self.value, str):
            if not self.value.isascii() or not self.value.isprintable():
                raise ValueError(f"{self.source}: {self.value!r} is not printable ASCII")
            return '"' + self.value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if not -(2**63) <= self.value < 2**63:
            raise ValueError(f"{self.source}: {self.value} is beyond a signed 64-bit integer")
        return f"{self.value}{suffix}"


def _constant(
    module: ModuleType,
    attribute: str,
    kind: ConstantType = INT,
    name: str | None = None,
    value: int | str | None = None,
) -> Constant:
    """`module.attribute` (or `value`, a form of it) as a constant named `name`, else as in Python."""
    value = getattr(module, attribute) if value is None else value
    return Constant(name or attribute, value, kind, f"{module.__name__}.{attribute}")


def _whole_match(pattern: re.Pattern[str]) -> str:
    r"""A Python pattern anchored by \A and \Z, as the unanchored regex Java's `Matcher.matches()` takes."""
    if not (pattern.pattern.startswith("\\A") and pattern.pattern.endswith("\\Z")):
        raise ValueError(f"{pattern.pattern!r} is not anchored by \\A and \\Z")
    return pattern.pattern[2:-2]


def count_record_fields() -> list[str]:
    """The keys a count record's JSON may hold (audit.contract.record.to_json), every optional one included."""
    from audit.contract.record import Latency, count_record, to_json

    full = count_record(
        record_id="i:1",
        tier="t",
        cluster="c",
        topic="t",
        window_start_ms=0,
        by_partition={0: 1},
        digest_by_partition={0: 0},
        latency_ms=Latency(0, 0, 0, 0),
        aborted=1,
        unknown=True,
        emitted_at_ms=0,
    )
    return sorted(to_json(full))


def contract_constants() -> list[Constant]:
    """The constants of the contract the plugin and the Java interceptor share, from the Python modules that state
    them: the one table both contract_header() and java_contract() write."""
    from audit.contract import audit_time, digest, names, record, windows
    from audit.io import plugin

    return [
        _constant(record, "AUDIT_TIME_HEADER", TEXT),
        _constant(audit_time, "AUDIT_TIME_HEADER_MAX_DIGITS"),
        _constant(record, "MAX_AUDIT_TIME_MS", LONG),
        _constant(names, "DEFAULT_AUDIT_TOPIC", TEXT),
        _constant(names, "PRODUCER_TIER", TEXT),
        _constant(record, "SCHEMA_VERSION"),
        Constant("COUNT_KIND", str(record.Kind.COUNT), TEXT, "audit.contract.record.Kind.COUNT"),
        _constant(windows, "DEFAULT_WINDOW_MINUTES"),
        _constant(windows, "MINUTES_PER_DAY"),
        _constant(windows, "MS_PER_MINUTE", LONG),
        _constant(plugin, "DEFAULT_FLUSH_INTERVAL_MS"),
        _constant(plugin, "DEFAULT_MAX_ENTRIES"),
        _constant(plugin, "MOST_MAX_ENTRIES", name="MAX_MAX_ENTRIES"),
        _constant(digest, "DIGEST_SEED", ULONG),
        _constant(digest, "KEY_NULL", UINT, name="DIGEST_KEY_NULL"),
        _constant(digest, "VALUE_NULL", UINT, name="DIGEST_VALUE_NULL"),
        _constant(names, "NAME_PATTERN", TEXT, value=_whole_match(names.NAME_PATTERN)),
        _constant(names, "CONTROL_CHARACTERS", TEXT, value=names.CONTROL_CHARACTERS.pattern),
        *(
            Constant(f"FIELD_{field.upper()}", field, TEXT, "audit.contract.record.to_json")
            for field in count_record_fields()
        ),
    ]


def contract_header() -> str:
    """The C constants of the contract, from the Python modules that state them."""
    from audit.contract.tally import latency_floor_values

    floors, values = latency_floor_values()
    major, minor = RDKAFKA_TESTED_BEYOND
    return "\n".join(
        [
            "/* Generated by native/build.py from the Python contract: do not edit. */",
            "#ifndef KAUDIT_CONTRACT_H",
            "#define KAUDIT_CONTRACT_H",
            "#include <stdint.h>",
            *(f"#define KAUDIT_{c.name} {c.literal(c.type.c_suffix)}" for c in contract_constants()),
            "#ifndef KAUDIT_RDKAFKA_LOWEST",
            "#define KAUDIT_RDKAFKA_LOWEST RD_KAFKA_VERSION",
            "#endif",
            "#ifndef KAUDIT_RDKAFKA_BEYOND",
            f"#define KAUDIT_RDKAFKA_BEYOND 0x{major:02x}{minor:02x}0000",
            "#endif",
            f"#define KAUDIT_N_FLOORS {len(floors)}",
            "static const int64_t kaudit_floors[KAUDIT_N_FLOORS] = {" + ",".join(f"{f}LL" for f in floors) + "};",
            "static const double kaudit_floor_values[KAUDIT_N_FLOORS] = {" + ",".join(map(repr, values)) + "};",
            "#endif",
            "",
        ]
    )


def java_contract() -> str:
    """io/kaudit/Contract.java: the same constants for the Java producer interceptor (committed; a test holds it to
    this function)."""
    return "\n".join(
        [
            f"// Generated by native/build.py from the Python contract: do not edit; `{JAVA_COMMAND}` writes it.",
            "package io.kaudit;",
            "",
            "/** The audit contract's constants the interceptor shares with the librdkafka plugin (native/build.py). */",
            "public final class Contract {",
            *(
                f"    public static final {c.type.java_type} {c.name} = {c.literal(c.type.java_suffix)}; // {c.source}"
                for c in contract_constants()
            ),
            "",
            "    private Contract() {}",
            "}",
            "",
        ]
    )


def plugin_command(output: Path, defines: tuple[str, ...] = ()) -> list[str]:
    """The compiler call that builds the plugin into `output` (tests build variants with other `defines`)."""
    return [
        os.environ.get("CC", "cc"),
        *("-O2", "-g0", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Werror", "-pthread"),
        *(f"-D{define}" for define in defines),
        f"-I{ROOT / 'native'}",
        f"-I{BUILD / 'include'}",
        "-o",
        str(output),
        *map(str, PLUGIN_SOURCES),
        "-ldl",
    ]


def build_plugin() -> None:
    if not RDKAFKA_HEADER.exists():
        raise RuntimeError(f"{RDKAFKA_HEADER} is missing: install Debian's librdkafka-dev (make setup does)")
    if not XXHASH_HEADER.exists():
        raise RuntimeError(f"{XXHASH_HEADER} is missing: install Debian's libxxhash-dev (make setup does)")
    include = BUILD / "include"
    include.mkdir(parents=True, exist_ok=True)
    (include / "kaudit_contract.h").write_text(contract_header())
    subprocess.run(plugin_command(PLUGIN), check=True)


def main() -> int:
    if sys.argv[1:] == ["--java"]:
        JAVA_CONTRACT.write_text(java_contract())
        return 0
    try:
        build_plugin()
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"the librdkafka plugin did not build: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
