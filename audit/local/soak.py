"""`kaudit soak`: the whole pipeline under steady load while faults are injected at random.

Its own local clusters (dc1, dc2 -> aggregate) and tables under `<state_dir>/soak` (never the
demo's), 1-minute windows with a 60 s grace so windows turn final during the run. In order:
1. clusters up, topics, counters, replicators, lake job and continuous reconciliation started;
2. an hour of audited traffic backfilled; the dc1 replicator loses exactly K messages of `orders`
   in one past window (its drop hook), and the soak waits until that replicator committed past
   them, so later kills cannot undo the loss; a few malformed records go into dc2's audit topic;
3. steady live traffic for --minutes while, seeded and printed, one fault at a time: kill -9 of a
   counter, a replicator or the lake job (then restarted), a broker's JVM killed and restarted,
   the reconciliation killed mid-run (then rerun). A service that exits on its own is logged,
   counted and restarted;
4. the load stops, every service runs to caught-up (replicators, then counters and the lake), the
   reconciliation service's next whole run is the final one, then `audit.local.soak_check` compares
   the Delta tables with the ground truth and prints the report. Exit 0 when every invariant holds, 1 when one failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from audit.contract.errors import ConfigError, HarnessError
from audit.contract.record import iso
from audit.contract.windows import window_end, window_start
from audit.local.pipeline import (
    TOPICS,
    DropPlan,
    PipelinePlan,
    create_topics,
    drop_window,
    replicator_args,
    start_services,
)
from audit.local.services import Supervisor, count_in_log, log_tail
from audit.local.soak_check import render
from audit.local.soak_plan import (
    COMPACTED_CONFIG,
    COMPACTED_TOPIC,
    GRACE_S,
    SPARK_RESTART_LIMIT_S,
    TOMBSTONE_EVERY,
    TRANSACTIONAL_TOPIC,
    WINDOW_MINUTES,
    Fault,
    FaultDone,
    SoakLog,
    fault_schedule,
    fresh_soak_dir,
    write_soak_config,
)
from audit.local.soak_report import soak_verdict, write_report

if TYPE_CHECKING:
    from audit.settings import Settings

BACKFILL_HOURS = 1.0
RECONCILE_INTERVAL_S = 15.0
CATCH_UP_TIMEOUT_S = 600.0
RECONCILE_RUN = "audit messages:"
SPARK_START_S = 30.0  # a Spark job is inside its work this long after start, on 2 loaded cores


def exactly_once_clusters(args: argparse.Namespace, regional: tuple[str, ...]) -> frozenset[str]:
    """The regional clusters whose replicator runs exactly once, from `--exactly-once [CLUSTERS]`."""
    value = getattr(args, "exactly_once", "")
    if value is True or value == "all":
        return frozenset(regional)
    named = {name.strip() for name in (value or "").split(",") if name.strip()}
    unknown = sorted(named - set(regional))
    if unknown:
        raise ConfigError(
            f"--exactly-once {value}: {', '.join(unknown)} is not a regional cluster (they are: {', '.join(regional)})"
        )
    return frozenset(named)


class Soak:
    def __init__(self, args: argparse.Namespace, settings: Settings, soak_dir: Path) -> None:
        from audit.local.clusters import local_clusters

        self.args, self.settings, self.soak_dir = args, settings, soak_dir
        self.clusters = local_clusters(settings, brokers=getattr(args, "brokers", None))
        self.regional, self.hub = tuple(settings.cluster_names[:-1]), settings.cluster_names[-1]
        self.rng = random.Random(args.seed)
        self.log = SoakLog(seed=args.seed)
        drop_count = args.drop_count if args.drop_count is not None else self.rng.randint(3, 12)
        self.drop = DropPlan(
            self.regional[0], "orders", drop_window(BACKFILL_HOURS, window_minutes=WINDOW_MINUTES), drop_count
        )
        self.plan = PipelinePlan(
            regional=self.regional,
            hub=self.hub,
            topics=(*TOPICS, COMPACTED_TOPIC),
            topic_configs={COMPACTED_TOPIC: COMPACTED_CONFIG},
            drop=self.drop,
            flush_interval_s=5.0,
            status_interval_s=5.0,
            stall_after_s=30.0,
            lake_trigger_s=5.0,
            reconcile_interval_s=RECONCILE_INTERVAL_S,
            with_ui=False,
            exactly_once=exactly_once_clusters(args, self.regional),
        )
        self.plan_after_drop = dataclasses.replace(self.plan, drop=None)
        self.supervisor = Supervisor(
            soak_dir,
            config=soak_dir / "soak.toml",
            env={
                "KAUDIT_CONFIG": str(soak_dir / "soak.toml"),
                "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            },
        )
        self.began = time.monotonic()
        self.expected_dead: set[str] = set()
        self.started_at: dict[str, float] = {}  # service -> monotonic time of its last start
        self.started_at_offset: dict[str, int] = {}  # service -> size of its log at its last start

    # -- phases ---------------------------------------------------------------------------------

    def say(self, text: str) -> None:
        print(f"[soak {time.monotonic() - self.began:6.0f} s] {text}", flush=True)

    def start(self) -> None:
        self.say(f"starting local clusters {', '.join(c.name for c in self.clusters)} under {self.soak_dir}")
        self.clusters.up()
        create_topics(self.settings, self.plan)
        start_services(self.supervisor, self.settings, self.plan)
        for name in self.supervisor.services:
            self._mark_started(name)
        self.say("services started: " + ", ".join(self.supervisor.services))

    def backfill(self) -> None:
        self.say(
            f"backfilling {self.args.backfill_messages:,} messages per regional cluster over {BACKFILL_HOURS:g} h; "
            f"replicator {self.drop.cluster} drops {self.drop.count} of {self.drop.topic} in the window "
            f"starting {iso(self.drop.window_start_ms, millis=False)}"
        )
        for index, cluster in enumerate(self.regional):
            result = self.supervisor.run(
                "produce",
                "--cluster",
                cluster,
                "--topics",
                ",".join(self.plan.topics),
                "--count",
                str(self.args.backfill_messages),
                "--backfill-hours",
                str(BACKFILL_HOURS),
                "--tombstone-every",
                str(TOMBSTONE_EVERY),
                "--seed",
                str(self.log.seed + index),
                timeout_s=900,
            )
            self.log.tally_producer(cluster, result.stdout)
            if result.returncode != 0:
                raise HarnessError(f"backfilling {cluster} failed: {result.stderr[-2000:]}")
        self.inject_malformed_records()
        self.wait_drop_committed()

    def inject_malformed_records(self) -> None:
        """Invariant 6: garbage in an audit topic is rejected with a reason and stops nothing."""
        from confluent_kafka import Producer

        from audit.io.clients import client_config

        cluster = self.regional[-1]
        marker = f"soak-{self.log.seed}-malformed"
        bad = [
            f"not json at all {marker}-0".encode(),
            json.dumps({"schema_version": 1, "kind": "count", "record_id": f"{marker}-1"}).encode(),
            json.dumps(
                {
                    "schema_version": 1,
                    "kind": "count",
                    "record_id": f"{marker}-2",
                    "tier": "dc2",
                    "cluster": "dc2",
                    "topic": "orders",
                    "window_start": "yesterday",
                    "count": "many",
                }
            ).encode(),
        ]
        producer = Producer(client_config(self.settings, cluster))
        for value in bad:
            producer.produce(self.settings.audit_topic, value=value)
        if producer.flush(30):
            raise HarnessError(f"could not write the malformed audit records to {cluster}")
        self.log.malformed_markers = tuple(f"{marker}-{i}" for i in range(len(bad)))
        self.say(f"wrote {len(bad)} malformed records into {cluster}'s {self.settings.audit_topic}")

    def wait_drop_committed(self, timeout_s: float = 300.0) -> None:
        """Until the drop replicator committed past the backfill of its topic, so a kill cannot re-copy what it lost."""
        from confluent_kafka import Consumer, TopicPartition

        from audit.io.clients import client_config, watermarks

        topic, config = self.drop.topic, client_config(self.settings, self.drop.cluster)
        group = f"kaudit-mirror-{self.drop.cluster}-{self.hub}"
        consumer = Consumer({**config, "group.id": group, "enable.auto.commit": False})
        try:
            partitions = [
                TopicPartition(topic, p) for p in consumer.list_topics(topic, timeout=30).topics[topic].partitions
            ]
            ends = {tp.partition: watermarks(consumer, topic, tp.partition)[1] for tp in partitions}
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                committed = {tp.partition: tp.offset for tp in consumer.committed(partitions, timeout=30)}
                if all(committed.get(p, -1) >= end for p, end in ends.items()):
                    self.say(
                        f"replicator {self.drop.cluster} committed past the backfill of {topic}: the loss is final"
                    )
                    return
                self.watch_services()
                time.sleep(2.0)
        finally:
            consumer.close()
        raise HarnessError(
            f"replicator {self.drop.cluster} did not commit past the backfill of {topic} in {timeout_s:.0f} s"
        )

    def load_with_faults(self) -> None:
        duration_s = self.args.minutes * 60
        schedule = fault_schedule(self.rng, duration_s, self.args.fault_gap_s, self.regional, self.hub)
        self.say(
            f"seed {self.log.seed}: live load {self.args.rate:g} msg/s per regional cluster for {duration_s:.0f} s, "
            f"{len(schedule)} faults planned: " + ", ".join(f"{f.at_s:.0f}s {f.kind} {f.target}" for f in schedule)
        )
        for index, cluster in enumerate(self.regional):
            self.supervisor.start(
                f"produce-{cluster}",
                "produce",
                "--cluster",
                cluster,
                "--topics",
                ",".join(self.plan.topics),
                "--rate",
                str(self.args.rate),
                "--duration-s",
                str(duration_s),
                "--seed",
                str(self.log.seed + 100 + index),
                "--tombstone-every",
                str(TOMBSTONE_EVERY),
            )
        transactional = f"txn-{self.regional[0]}"
        self.supervisor.start(
            transactional,
            *("produce", "--cluster", self.regional[0], "--topics", TRANSACTIONAL_TOPIC, "--partitions", "3"),
            *("--transactional", "--rate", str(self.args.rate / 2), "--duration-s", str(duration_s)),
        )
        load_began = time.monotonic()
        for fault in schedule:
            while time.monotonic() - load_began < fault.at_s:
                self.watch_services()
                time.sleep(0.5)
            done = self.inject(fault, began_s=time.monotonic() - load_began)
            self.log.faults.append(done)
            self.say(
                f"fault {len(self.log.faults)}/{len(schedule)}: {fault.kind} {fault.target}, down {done.down_s:.1f} s"
                + (f" ({done.note})" if done.note else "")
            )
        loads = [f"produce-{c}" for c in self.regional] + [transactional]
        while any(self.supervisor.services[name].alive for name in loads):
            if time.monotonic() - load_began > duration_s + 300:
                raise HarnessError("the producers did not finish 300 s after the load's end")
            self.watch_services()
            time.sleep(1.0)
        self.log.load_ended_ms = time.time_ns() // 1_000_000
        for cluster in self.regional:
            service = self.supervisor.services[f"produce-{cluster}"]
            self.log.tally_producer(cluster, service.log_path.read_text(errors="replace"))
        self.log.note_transactions(self.supervisor.services[transactional].log_path.read_text(errors="replace"))

    def inject(self, fault: Fault, began_s: float) -> FaultDone:
        down_s = round(self.rng.uniform(1.0, 5.0), 1)
        note = ""
        if fault.kind == "kill-broker":
            down_s = round(self.rng.uniform(5.0, 15.0), 1)
            cluster = self.clusters[fault.target]
            brokers = getattr(self.args, "brokers", None) or 1
            if brokers > 1:  # one machine of the cluster crashes: its replicas elsewhere take over, nothing is lost
                node_id = self.rng.randint(1, brokers)
                cluster.kill_broker(node_id)
                note = f"broker {node_id}; "
            else:
                cluster.kill()
            time.sleep(down_s)
            note += f"back in {cluster.start():.1f} s"
            return FaultDone(fault, began_s, down_s, note, ended_at_ms=time.time_ns() // 1_000_000)
        name = {"kill-counter": f"count-{fault.target}", "kill-replicator": f"mirror-{fault.target}"}.get(
            fault.kind, fault.target
        )
        if fault.kind == "kill-reconcile":
            note = self._wait_reconcile_mid_run()
        self.expected_dead.add(name)
        self.supervisor.kill(name)
        time.sleep(down_s)
        self.expected_dead.discard(name)
        self._restart(name)
        return FaultDone(fault, began_s, down_s, note, ended_at_ms=time.time_ns() // 1_000_000)

    def _wait_reconcile_mid_run(self, timeout_s: float = 60.0) -> str:
        """Until the reconciliation is inside a run: its first run (Spark up, no run line yet), or its log quiet
        for longer than the pause between runs."""
        service = self.supervisor.services["reconcile"]
        quiet_s = RECONCILE_INTERVAL_S + self.rng.uniform(1.0, 4.0)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and service.alive:
            age_s = time.monotonic() - self.started_at.get("reconcile", self.began)
            runs = count_in_log(service.log_path, RECONCILE_RUN, since=self.started_at_offset.get("reconcile", 0))
            if runs == 0 and age_s >= SPARK_START_S:
                return f"killed in its first run, {age_s:.0f} s after start"
            if runs and time.time() - service.log_path.stat().st_mtime >= quiet_s:
                return f"killed {quiet_s - RECONCILE_INTERVAL_S:.0f} s into run {runs + 1}"
            time.sleep(0.5)
        return "killed at the end of the wait (no run seen in progress)"

    def _mark_started(self, name: str) -> None:
        self.started_at[name] = time.monotonic()
        path = self.supervisor.services[name].log_path
        self.started_at_offset[name] = path.stat().st_size if path.exists() else 0

    def _restart(self, name: str) -> None:
        if name.startswith("mirror-"):  # the loss is final; a restarted replicator drops nothing more
            self.supervisor.start(name, *replicator_args(self.plan_after_drop, name.removeprefix("mirror-")))
        else:
            self.supervisor.restart(name)
        self._mark_started(name)

    def watch_services(self) -> None:
        """A long-running service that exited without being killed is logged, counted and restarted."""
        for name, service in list(self.supervisor.services.items()):
            if name.startswith(("produce-", "catchup-", "txn-")) or name in self.expected_dead or service.alive:
                continue
            tail = log_tail(service.log_path, 2)
            self.log.unplanned_exits.append(
                f"{name} exit {service.process.returncode} at {time.monotonic() - self.began:.0f} s: {tail}"
            )
            self.say(f"UNPLANNED EXIT of {name} (exit {service.process.returncode}); restarting. Log: {tail}")
            self._restart(name)

    def measure_recovery(self) -> None:
        """Seconds from each fault's end to the next progress of every service it touched (soak_recovery)."""
        from audit.local.soak_recovery import measure_from_pipeline, pending, summary

        reconcile_log = self.supervisor.services["reconcile"].log_path
        deadline = (self.log.faults[-1].ended_at_ms / 1000 if self.log.faults else 0) + SPARK_RESTART_LIMIT_S + 5
        while True:
            measured = measure_from_pipeline(self.settings, self.log.faults, reconcile_log, self.regional, self.hub)
            if not pending(measured) or time.time() > deadline:
                break
            for _ in range(20):
                self.watch_services()
                time.sleep(0.5)
        self.log.recoveries = measured
        facts = summary(measured)
        self.say(
            f"recovery after faults: p50 {facts['p50_s']} s, max {facts['max_s']} s; too slow: {facts['too_slow']}"
        )

    def catch_up(self) -> None:
        """Stop the continuous services but the reconciliation, run each to caught-up in data-flow order, then
        take the reconciliation's first whole run after that as the final one.

        The stops come first: nothing they do while the last window waits out its grace is checked, and the
        lake job takes seconds to stop (all are stopped at once). The reconciliation runs on, warm: its next
        run reads what the catch-up counted as a new process would (a restart gives the same tables; its own
        test proves it), without a new Spark JVM's start and first run."""
        for cluster in self.clusters:
            cluster.start()
        services = [n for n in self.supervisor.services if not n.startswith("produce-") and n != "reconcile"]
        for name, seconds in self.supervisor.stop_all(services).items():
            self.log.stops_s[name] = round(seconds, 1)
        self.wait_last_window_past_grace()
        self.say("load over; every cluster up, services run to caught-up")
        self._run_all(
            {
                f"catchup-mirror-{c}": [*replicator_args(self.plan_after_drop, c), "--until-caught-up"]
                for c in self.regional
            }
        )
        steps = {
            f"catchup-count-{c}": [
                "count",
                "--cluster",
                c,
                "--flush-interval-s",
                "2",
                "--topic-refresh-s",
                "5",
                "--until-caught-up",
            ]
            for c in self.settings.cluster_names
        }
        steps["catchup-lake"] = ["lake", "--cluster", self.hub, "--until-caught-up"]
        self._run_all(steps)
        self.final_reconciliation()

    def final_reconciliation(self, timeout_s: float = CATCH_UP_TIMEOUT_S) -> None:
        """Wait for a whole run of the reconciliation service begun after the catch-up, then stop the service."""
        service = self.supervisor.services["reconcile"]
        since, runs_to_wait = service.log_path.stat().st_size, 2  # the first run to end may have begun before
        if not service.alive:
            self._restart("reconcile")
            service = self.supervisor.services["reconcile"]
            since, runs_to_wait = self.started_at_offset["reconcile"], 1
        self.say("final reconciliation: the service's first whole run after the catch-up")
        deadline = time.monotonic() + timeout_s
        while count_in_log(service.log_path, RECONCILE_RUN, since=since) < runs_to_wait:
            if not service.alive or time.monotonic() > deadline:
                state = "exited" if not service.alive else f"no whole run within {timeout_s:.0f} s"
                raise HarnessError(f"the final reconciliation failed ({state}): {log_tail(service.log_path, 5)}")
            time.sleep(0.5)
        for name, seconds in self.supervisor.stop_all(["reconcile"]).items():
            self.log.stops_s[name] = round(seconds, 1)

    def wait_last_window_past_grace(self) -> None:
        """A caught-up service's status says watermark = now: the catch-up starts once the load's last window
        is past its end and grace, so its statuses make every window final (invariant 7 requires it of the
        transactional topic, whose last window may end seconds before the load does)."""
        last_end_ms = window_end(window_start(self.log.load_ended_ms, WINDOW_MINUTES), WINDOW_MINUTES)
        ready_ms = last_end_ms + GRACE_S * 1000 + 1000
        wait_s = (ready_ms - time.time_ns() // 1_000_000) / 1000
        if wait_s <= 0:
            return
        self.say(f"waiting {wait_s:.0f} s for the load's last window to pass its {GRACE_S} s grace")
        time.sleep(max(0.0, ready_ms / 1000 - time.time()))  # the services are stopped: none to watch

    def _run_all(self, steps: dict[str, list[str]]) -> None:
        for name, args in steps.items():
            self.supervisor.start(name, *args)
        deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
        for name in steps:
            service = self.supervisor.services[name]
            service.process.wait(max(1.0, deadline - time.monotonic()))
            if service.process.returncode != 0:
                raise HarnessError(f"{name} exited {service.process.returncode}: {log_tail(service.log_path, 5)}")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from audit.settings import load_settings

    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 1_000_000)
    soak_dir = (args.state_dir or Path(settings.state_dir) / "soak").expanduser().resolve()
    fresh_soak_dir(soak_dir)
    soak_settings = load_settings(write_soak_config(settings, soak_dir))
    soak = Soak(args, soak_settings, soak_dir)
    soak.say(f"seed {args.seed} (rerun the same schedule with --seed {args.seed})")
    phase_began = time.monotonic()

    def phase(name: str) -> None:
        nonlocal phase_began
        soak.log.phases_s[name] = time.monotonic() - phase_began
        phase_began = time.monotonic()

    try:
        soak.start()
        phase("start")
        soak.backfill()
        phase("backfill")
        soak.load_with_faults()
        soak.measure_recovery()
        phase("load")
        soak.catch_up()
        phase("catch-up")
        verdict = soak_verdict(soak)
        phase("check")
    finally:
        soak.say("stopping services" + ("" if args.keep else " and clusters"))
        soak.supervisor.stop_all()
        if not args.keep:
            soak.clusters.down()
    print(render(verdict), flush=True)
    report_path = args.report_json or soak_dir / "report.json"
    write_report(verdict, report_path)
    print(f"report: {report_path}; logs: {soak_dir / 'logs'}", flush=True)
    return 0 if verdict.ok else 1
