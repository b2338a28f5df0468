"""Coverage-guided fuzzing (atheris / libFuzzer) of the three parsers that read untrusted input.

    python fuzz/fuzz_inputs.py --target record|settings|headers [CORPUS_DIR ...] [-max_total_time=60]

`make fuzz FUZZ_SECONDS=60` runs each target for that long with a working corpus under
.kaudit/fuzz/<target>, seeded from fuzz/seeds/<target>. Every input must give an answer, never an
exception: `parse` a record or a reason, the config loader Settings or a ConfigError, the header
readers a usable time. A finding is written as crash-<hash> in the working directory, and the run
exits non-zero.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import atheris
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE

# Coverage is traced in the parsers and in the libraries that read the same bytes (TOML, pydantic's settings and
# validation), not in everything they import: instrumenting asyncio, email, confluent_kafka and the rest takes
# about 19 of a 3-second run's 23 s and gives the fuzzer no edge that leads into a parser.
INSTRUMENTED = ("audit", "tomllib", "pydantic", "pydantic_settings")

with atheris.instrument_imports(include=INSTRUMENTED):
    from audit import settings
    from audit.contract import audit_time, record, windows
    from audit.contract.errors import ConfigError
    from audit.hops.replicator.hop import provenance

TARGETS = ("record", "settings", "headers")
ENV_NAMES = [
    "KAUDIT_WINDOW_MINUTES",
    "KAUDIT_GRACE_S",
    "KAUDIT_METRICS_HOST",
    "KAUDIT_AUDIT_TOPIC",
    "KAUDIT_CLUSTER_DC1_BOOTSTRAP_SERVERS",
    "KAUDIT_CLUSTER_DC1_LOCAL",
    "KAUDIT_CLUSTER_DC1_CLIENT__SASL__PASSWORD",
    "KAUDIT_STATE_DIR",
]
# In the working directory, where libFuzzer writes its findings too (`make fuzz` and the test each give
# the run a scratch one): a temporary directory would outlive the run, as libFuzzer exits without Python's clean-up.
_CONFIG_FILE = Path("fuzz-settings.toml")


def fuzz_record(data: bytes) -> None:
    for payload in (data, data.decode("utf-8", "replace")):
        parsed, reason = record.parse(payload)
        if (parsed is None) == (reason is None):
            raise AssertionError(f"parse gave {parsed!r}, {reason!r}")
        if parsed is not None:  # what parses must encode and parse back to itself
            again, why = record.parse(record.encode(parsed))
            if again != parsed:
                raise AssertionError(f"round trip changed the record: {why}")


def fuzz_settings(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    env = {
        fdp.PickValueInList(ENV_NAMES): fdp.ConsumeUnicodeNoSurrogates(12) for _ in range(fdp.ConsumeIntInRange(0, 2))
    }
    _CONFIG_FILE.write_bytes(fdp.ConsumeBytes(fdp.remaining_bytes()))
    try:
        settings.load_settings(_CONFIG_FILE, env=env)
    except ConfigError as exc:
        if not str(exc):
            raise AssertionError("a ConfigError without a message") from exc


def fuzz_headers(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    kind = fdp.PickValueInList([TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE])
    value = fdp.ConsumeIntInRange(-(2**63), 2**63 - 1)
    headers = []
    for _ in range(fdp.ConsumeIntInRange(0, 4)):
        name = fdp.PickValueInList([record.AUDIT_TIME_HEADER, record.PROVENANCE_HEADER, "x"])
        headers.append((name, fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 40)) if fdp.ConsumeBool() else None))
    when, _usable = audit_time.audit_time((kind, value), headers, 1_763_800_000_000)
    if not 0 < when <= record.MAX_AUDIT_TIME_MS:
        raise AssertionError(f"audit time {when} is out of range")
    record.iso(windows.window_start(when))  # a window start every record can carry
    for name in provenance(headers):
        if not (isinstance(name, str) and name.isascii() and name):
            raise AssertionError(f"provenance name {name!r}")


def main() -> None:
    argv = list(sys.argv)
    target = "record"
    if "--target" in argv:
        index = argv.index("--target")
        target = argv[index + 1]
        del argv[index : index + 2]
    if target not in TARGETS:
        sys.exit(f"--target: {target!r} is not one of {', '.join(TARGETS)}")
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    os.environ.pop("KAUDIT_CONFIG", None)
    atheris.Setup(argv, {"record": fuzz_record, "settings": fuzz_settings, "headers": fuzz_headers}[target])
    atheris.Fuzz()


if __name__ == "__main__":
    main()
