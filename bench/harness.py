"""What every benchmark shares: arguments, a throw-away local cluster, alternating rounds, the ratio."""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from audit.local.clusters import LocalCluster
from audit.settings import load_settings


def parse_args(doc: str, *, messages: int, flags: dict[str, str] | None = None) -> argparse.Namespace:
    """The common options, and a boolean option per `flags` entry (name -> help)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, help_text in (flags or {}).items():
        parser.add_argument(name, action="store_true", help=help_text)
    parser.add_argument("--messages", type=int, default=messages, help=f"messages per round (default {messages:,})")
    parser.add_argument("--size", type=int, default=100, help="value size in bytes (default 100)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each side, alternating (default 3)")
    # One side, one round, in a fresh interpreter against a running cluster (see `peak_rss`).
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    return parser.parse_args()


def report_side(rate: float, **extra: float) -> None:
    """What a `--side` run prints last: its rate, the peak RSS of its process, and any `extra` figures."""
    print(json.dumps({"rate": rate, "peak_rss_mb": round(peak_rss_mb(), 1), **extra}))


def peak_rss_mb() -> float:
    """This process's peak resident set size. VmHWM, not getrusage's ru_maxrss: Linux keeps the
    latter across exec, so a child started by vfork + exec reports its parent's peak."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_rss(module: str, sides: list[str], bootstrap: str, args: argparse.Namespace) -> dict[str, dict]:
    """Run one round of each side in its own interpreter (`python -m module --side ...`), so each
    peak RSS is that side's alone; print and return them."""
    results = {}
    for side in sides:
        argv = [sys.executable, "-m", module, "--side", side, "--bootstrap", bootstrap]
        argv += ["--messages", str(args.messages), "--size", str(args.size)]
        done = subprocess.run(argv, check=True, capture_output=True, text=True)
        results[side] = json.loads(done.stdout.strip().splitlines()[-1])
    print(
        f"peak RSS, one round of {args.messages:,} messages per process: "
        + ", ".join(
            f"{side} {r['peak_rss_mb']:,.1f} MB ({r['rate']:,.0f} msg/s"
            + (f", {r['cpu_us']:.2f} µs CPU a message)" if "cpu_us" in r else ")")
            for side, r in results.items()
        )
    )
    return results


@contextmanager
def bench_cluster() -> Iterator[str]:
    """A local cluster in a temporary folder, stopped at the end; yields its bootstrap address."""
    with tempfile.TemporaryDirectory() as state_dir:
        cluster = LocalCluster("bench", state_dir=Path(state_dir), cache_dir=load_settings().cache_dir, heap_mb=1024)
        print(f"cluster ready in {cluster.start():.1f} s")
        try:
            yield cluster.bootstrap_servers
        finally:
            cluster.stop()


Run = Callable[[], "float | tuple[float, float]"]


def compare(baseline: tuple[str, Run], ours: tuple[str, Run], *, rounds: int, goal: float) -> float:
    """Alternate the two sides `rounds` times; print each round and the medians; return ours / baseline.

    A side may return (msg/s, CPU µs a message) instead of msg/s: the CPU time of the process over the
    same span (utime + stime, the client's threads included). On a machine where other work competes
    for the cores it is the steadier figure, and its ratio is printed too."""
    (base_name, base_run), (our_name, our_run) = baseline, ours
    rates: dict[str, list[float]] = {base_name: [], our_name: []}
    cpus: dict[str, list[float]] = {base_name: [], our_name: []}

    def one(name: str, run: Run) -> str:
        result = run()
        rate, cpu = result if isinstance(result, tuple) else (result, None)
        rates[name].append(rate)
        if cpu is not None:
            cpus[name].append(cpu)
        return f"{name} {rate:,.0f} msg/s" + (f" ({cpu:.2f} µs CPU a message)" if cpu is not None else "")

    for round_ in range(1, rounds + 1):
        print(f"round {round_}: {one(base_name, base_run)}, {one(our_name, our_run)}")
    base_rate, our_rate = statistics.median(rates[base_name]), statistics.median(rates[our_name])
    ratio = our_rate / base_rate
    print(
        f"median: {base_name} {base_rate:,.0f} msg/s, {our_name} {our_rate:,.0f} msg/s, "
        f"ratio {our_name}/{base_name} {ratio:.2f} (goal >= {goal:.2f})"
    )
    if cpus[base_name] and cpus[our_name]:
        base_cpu, our_cpu = statistics.median(cpus[base_name]), statistics.median(cpus[our_name])
        print(
            f"median CPU a message: {base_name} {base_cpu:.3f} µs, {our_name} {our_cpu:.3f} µs, "
            f"ratio {base_name}/{our_name} {base_cpu / our_cpu:.2f} (msg per CPU-second, {our_name} over {base_name})"
        )
    return ratio
