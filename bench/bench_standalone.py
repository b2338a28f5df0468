"""The reconciliation on a Spark standalone cluster (a master and two workers on loopback, started with
pyspark's own scripts, the job sent with `spark-submit`) against the same job on local[2], same input.

    .venv/bin/python -m bench.bench_standalone [--topics 200] [--windows 20] [--workers 2]

Starts two local Kafka clusters and writes topics x windows x 5 tiers count records (bench_reconcile's
records), then reconciles them twice into two lakes: in this process on local[2], and as
`spark-submit --master spark://127.0.0.1:<port> audit/cli/__main__.py reconcile` on the standalone
cluster. Prints both times and whether `tier_counts` and `completeness` came out the same (exit 1 if
not). On this 2-core machine the workers share the same two cores, so the figure shows the mechanism
and the equal results, not a speed-up.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

import audit.cli
from audit.books.run import reconcile
from audit.contract.windows import window_start
from audit.io.clients import ensure_topics
from audit.io.lake import lake_of
from audit.io.lake_read import read_frame
from audit.io.logs import setup_logging
from audit.io.spark import spark_session
from audit.local.clusters import LocalClusters
from audit.local.spark_standalone import SparkStandalone
from audit.settings import ClusterSettings, Settings, load_settings
from bench.bench_reconcile import MINUTE, PARTITIONS, TIERS, produce, records

COMPARED = ("tier_counts", "completeness")
MOMENTS = ("updated_at", "ingested_at")  # when a run wrote a row: differs between any two runs


def lake_settings(addresses: dict[str, str], state: Path, cache: Path, lake: str) -> Settings:
    clusters = tuple(ClusterSettings(name=n, bootstrap_servers=a, local=False) for n, a in addresses.items())
    return Settings(clusters=clusters, state_dir=state, cache_dir=cache, lake_path=lake)


def config_file(settings: Settings, path: Path) -> Path:
    """`settings` as the TOML the spark-submitted `kaudit` loads."""
    lines = [f'state_dir = "{settings.state_dir}"', f'cache_dir = "{settings.cache_dir}"']
    lines.append(f'lake_path = "{settings.lake_path}"')
    for cluster in settings.clusters:
        lines += ["[[clusters]]", f'name = "{cluster.name}"', f'bootstrap_servers = "{cluster.bootstrap_servers}"']
        lines.append("local = false")
    path.write_text("\n".join(lines) + "\n")
    return path


def table_rows(lake: str, name: str) -> pd.DataFrame:
    frame = read_frame(lake, name).drop(columns=list(MOMENTS), errors="ignore").astype(str)
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


def submit(command: list[str]) -> list[str]:
    """Run spark-submit, echoing the driver's step lines as they come; its output lines. Raises on failure."""
    lines = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as driver:
        for line in driver.stdout:
            lines.append(line.rstrip())
            if "reconcile step done" in line:
                print(f"  standalone {line.strip()}", flush=True)
    if driver.returncode != 0:
        print("\n".join(lines[-60:]), file=sys.stderr)
        raise SystemExit(f"spark-submit failed with exit code {driver.returncode}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=200, help="topics (default 200)")
    parser.add_argument("--windows", type=int, default=20, help="windows per topic (default 20)")
    parser.add_argument("--workers", type=int, default=2, help="standalone workers, 1 core and 1 GB each (default 2)")
    args = parser.parse_args()
    setup_logging("INFO", "kv")
    total = args.topics * args.windows * len(TIERS) + args.topics * (len(TIERS) - 1)
    cache = load_settings().cache_dir
    with tempfile.TemporaryDirectory() as state_dir:
        state = Path(state_dir)
        clusters = LocalClusters(["dc1", "other"], state_dir=state, cache_dir=cache, quick_jit=False)
        clusters.up()
        try:
            dc1, other = clusters["dc1"].bootstrap_servers, clusters["other"].bootstrap_servers
            addresses = {"dc1": dc1, "dc2": other, "aggregate": other}
            local = lake_settings(addresses, state / "local", cache, str(state / "lake-local"))
            standalone = lake_settings(addresses, state / "standalone", cache, str(state / "lake-standalone"))
            ensure_topics({"bootstrap.servers": dc1}, {local.audit_topic: PARTITIONS})
            now = time.time_ns() // 1_000_000
            first = window_start(now - (args.windows + 12) * 10 * MINUTE)
            print(f"writing {total:,} audit records ({args.topics} topics x {args.windows} windows)", flush=True)
            produce(dc1, local.audit_topic, records(args.topics, args.windows, first_window=first, sequence="a"), total)

            print("reconcile on local[2] ...", flush=True)
            spark = spark_session(app_name="bench-local", cache_dir=cache)
            spark.sparkContext.setLogLevel("ERROR")
            began = time.monotonic()
            print(f"local[2]: {reconcile(spark, local).line()}", flush=True)
            local_s = time.monotonic() - began
            spark.stop()

            with SparkStandalone(state / "spark", workers=args.workers) as cluster:
                print(f"standalone cluster up: {cluster.master_url}, {args.workers} workers", flush=True)
                command = [*cluster.submit_command(cache), str(Path(audit.cli.__file__).parent / "__main__.py")]
                command += ["--config", str(config_file(standalone, state / "standalone.toml")), "reconcile"]
                began = time.monotonic()
                output = submit(command)
                standalone_s = time.monotonic() - began
            report = next((line for line in reversed(output) if line.startswith("read ")), output[-1])
            print(f"standalone: {report}", flush=True)
        finally:
            clusters.down()
        same = {
            name: table_rows(lake_of(local), name).equals(table_rows(lake_of(standalone), name)) for name in COMPARED
        }
        rows = {name: len(read_frame(lake_of(local), name)) for name in COMPARED}
    print()
    print("| what | records | local[2] | standalone, master + workers | same tables |")
    print(
        f"| reconcile, end to end from Kafka | {total:,} | {local_s:.1f} s | {standalone_s:.1f} s "
        f"(spark-submit, JVM start included) | "
        + ", ".join(f"{name} ({rows[name]:,} rows): {'yes' if ok else 'NO'}" for name, ok in same.items())
        + " |"
    )
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
