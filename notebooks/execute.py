"""Execute an analyst notebook top to bottom in this interpreter's kernel; write the executed copy.

    python notebooks/execute.py notebooks/completeness.ipynb .kaudit/notebooks/completeness.ipynb

Run by `make notebook` (against the lake of the current configuration) and by
tests/notebooks/test_notebook.py (against sample tables, through KAUDIT_LAKE_PATH). The kernel is
this Python (`sys.executable`, which must have ipykernel), started from a kernel spec written to a
temporary folder, so no kernel installed elsewhere on the machine can stand in for it; Spark's
Python workers use the same interpreter (PYSPARK_PYTHON). Exit status 1 names the failing cell.
Run as a script, never imported.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

KERNEL_NAME = "kaudit-python"
DEFAULT_TIMEOUT_S = 600


def write_kernel_spec(folder: Path) -> Path:
    """A kernel spec for this interpreter under `folder/<KERNEL_NAME>`; returns `folder`."""
    spec_dir = folder / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"kafka-audit ({sys.executable})",
        "language": "python",
        "env": {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                # Spark's driver binds to loopback, as every server here does.
                "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1))
    return folder


def execute(notebook: Path, output: Path, *, cwd: Path, timeout_s: int) -> float:
    """Run every cell of `notebook` with `cwd` as working folder; save to `output` even on failure.

    Returns the seconds taken; raises nbclient's CellExecutionError when a cell fails.
    """
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    nb = nbformat.read(notebook, as_version=4)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kaudit-kernels-") as kernels:
        specs = KernelSpecManager(kernel_dirs=[str(write_kernel_spec(Path(kernels)))])
        # IPC sockets in the temporary folder: no TCP port, nothing reachable from elsewhere.
        manager = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs, transport="ipc",
                                ip=str(Path(kernels) / "kernel"))
        client = NotebookClient(nb, km=manager, timeout=timeout_s, kernel_name=KERNEL_NAME,
                                resources={"metadata": {"path": str(cwd)}})
        try:
            client.execute(cleanup_kc=True)  # we own the kernel manager: shut the kernel (and its JVM) down
        finally:
            output.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, output)
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Execute a notebook in this Python's kernel (ipykernel) and write the executed copy. "
                    "The notebook finds its lake as kaudit does: KAUDIT_LAKE_PATH, else KAUDIT_CONFIG's "
                    "lake_path, else <state_dir>/lake.")
    parser.add_argument("notebook", type=Path, help="the .ipynb to run (left unchanged)")
    parser.add_argument("output", type=Path, help="where the executed copy goes, outputs included (keep it out of git)")
    parser.add_argument("--cwd", type=Path, default=Path.cwd(),
                        help="working folder of the kernel; relative state_dir settings resolve against it "
                             "(default: the current folder)")
    parser.add_argument("--timeout-s", type=int, default=DEFAULT_TIMEOUT_S,
                        help=f"seconds one cell may run (default {DEFAULT_TIMEOUT_S})")
    args = parser.parse_args(argv)
    from nbclient.exceptions import CellExecutionError

    try:
        seconds = execute(args.notebook, args.output, cwd=args.cwd.resolve(), timeout_s=args.timeout_s)
    except CellExecutionError as exc:
        print(f"{args.notebook}: a cell failed; executed copy with the error in {args.output}\n{exc}", file=sys.stderr)
        return 1
    print(f"{args.notebook}: every cell ran in {seconds:.1f} s; executed copy in {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
