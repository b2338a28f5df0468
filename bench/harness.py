"""What every benchmark shares: arguments, a throw-away local cluster, alternating rounds, the ratio."""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from audit.local.clusters import LocalCluster
from audit.settings import load_settings


def parse_args(doc: str, *, messages: int) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=messages, help=f"messages per round (default {messages:,})")
    parser.add_argument("--size", type=int, default=100, help="value size in bytes (default 100)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each side, alternating (default 3)")
    return parser.parse_args()


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


def compare(
    baseline: tuple[str, Callable[[], float]], ours: tuple[str, Callable[[], float]], *, rounds: int, goal: float
) -> float:
    """Alternate the two sides `rounds` times; print each round and the medians; return ours / baseline."""
    (base_name, base_run), (our_name, our_run) = baseline, ours
    base_rates, our_rates = [], []
    for round_ in range(1, rounds + 1):
        base_rates.append(base_run())
        our_rates.append(our_run())
        print(f"round {round_}: {base_name} {base_rates[-1]:,.0f} msg/s, {our_name} {our_rates[-1]:,.0f} msg/s")
    base_rate, our_rate = statistics.median(base_rates), statistics.median(our_rates)
    ratio = our_rate / base_rate
    print(
        f"median: {base_name} {base_rate:,.0f} msg/s, {our_name} {our_rate:,.0f} msg/s, "
        f"ratio {our_name}/{base_name} {ratio:.2f} (goal >= {goal:.2f})"
    )
    return ratio
