"""Build the C extensions in place (`make native`, run by `make setup`): `python native/build.py`.

Uses setuptools' compiler set-up (the flags the interpreter was built with), so it needs only a C
compiler and the Python headers. A failed build is reported and leaves the pure-Python fallbacks in use.
"""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import Distribution, Extension

ROOT = Path(__file__).resolve().parent.parent
HEADERS = ["native/audit_window.h", "native/latency_floors.h"]  # a change rebuilds the modules that include them
EXTENSIONS = [
    Extension(
        "audit.hops._fastcount",
        ["audit/hops/_fastcount.c"],
        depends=HEADERS,
        include_dirs=["native"],
        extra_compile_args=["-O2"],
    ),
    # Loaded into applications as a librdkafka plugin too: only its two entry points are exported.
    Extension(
        "producers._fastaudit",
        ["producers/_fastaudit.c", "producers/_fastaudit_produce.c", "producers/_fastaudit_plugin.c"],
        depends=[*HEADERS, "native/rdkafka_abi.h", "producers/_fastaudit.h"],
        include_dirs=["native"],
        extra_compile_args=["-O2", "-fvisibility=hidden"],
    ),
]


def main() -> int:
    distribution = Distribution({"name": "kafka-audit-native", "ext_modules": EXTENSIONS, "script_name": "build.py"})
    command = distribution.get_command_obj("build_ext")
    command.inplace = True
    command.build_temp = str(ROOT / "build" / "native")
    try:
        command.ensure_finalized()
        command.run()
    except Exception as exc:  # a platform without a compiler still runs, in pure Python
        print(f"native build failed, the pure-Python fallback stays in use: {exc}", file=sys.stderr)
        return 0
    return 0


if __name__ == "__main__":
    import os

    os.chdir(ROOT)
    sys.exit(main())
