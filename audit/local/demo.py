"""`kaudit demo`: the whole pipeline on the embedded local default, with two faults it must find.

Starts the local clusters (dc1, dc2 -> aggregate), a mailbox on loopback, a counter per cluster,
a replicator per spoke, the lake job, the continuous reconciliation (which emails alerts) and the
UI; backfills hours of audited traffic, then keeps live traffic flowing. Two faults are injected:
the dc1 replicator loses exactly N messages of `orders` in one window, and the dc2 replicator
stalls for a few minutes. The demo watches the Delta tables until both show (the loss exactly, the
stall as lag and never as loss), prints a summary, and runs until Ctrl-C or `make down`.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from audit.contract.record import iso
from audit.io.lake import lake_of
from audit.local.clusters import local_clusters
from audit.local.mailbox import mail_dir, saved_emails
from audit.local.pipeline import (
    DropPlan,
    PipelinePlan,
    StallPlan,
    backfill,
    create_topics,
    default_config_with,
    drop_window,
    hub_and_spokes,
    start_live_traffic,
    start_services,
)
from audit.local.services import Supervisor, stop_leftovers

if TYPE_CHECKING:
    from audit.settings import Settings


DEMO_RECIPIENTS = '["kafka-sre@example.com"]'
DEMO_ROUTE = '{ pattern = "orders", recipients = ["orders-team@example.com", "kafka-sre@example.com"] }'


def write_demo_config(settings: Settings) -> Path:
    """The built-in default, with absolute paths and alert recipients for the local mailbox."""
    text = default_config_with(
        [
            ('state_dir = ".kaudit"', f'state_dir = "{Path(settings.state_dir).resolve()}"'),
            ("default_recipients = []", f"default_recipients = {DEMO_RECIPIENTS}"),
            ("routes = []", f"routes = [{DEMO_ROUTE}]"),
        ]
    )
    path = Path(settings.state_dir) / "demo.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@dataclass
class Findings:
    """What the demo has seen in the tables and the mailbox so far."""

    loss_rows: list[tuple[str, int, int]] = field(
        default_factory=list
    )  # (tier, expected, missing) of the dropped window
    stall_seen: bool = False  # the stalled replicator showed as stalled/lagging
    stall_counted_as_loss: bool = False  # never: a final incomplete row or a LOSS email for the stalled cluster
    stall_recovered: bool = False
    lagging_keys: set[str] = field(default_factory=set)  # topic|window|tier seen lagging while stalled
    emails: list[tuple[Path, str]] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    stall_ended_after_s: float | None = None  # set when the demo ended the stall itself, once it showed

    def loss_found(self, plan: PipelinePlan) -> bool:
        tiers = {tier for tier, _expected, missing in self.loss_rows if missing == plan.drop.count}
        return {plan.hub, "lake"} <= tiers

    def loss_email(self, plan: PipelinePlan) -> bool:
        return any(f"{plan.drop.cluster}.{plan.drop.topic}" in subject for _path, subject in self.emails)

    def visible(self, plan: PipelinePlan) -> bool:
        """Both faults show: the loss exactly (and its email), the stall as lag."""
        return self.loss_found(plan) and self.loss_email(plan) and self.stall_seen and not self.stall_counted_as_loss

    def done(self, plan: PipelinePlan) -> bool:
        return (
            self.loss_found(plan)
            and self.loss_email(plan)
            and self.stall_seen
            and self.stall_recovered
            and not self.stall_counted_as_loss
        )


def observe(settings: Settings, plan: PipelinePlan, findings: Findings) -> None:
    """Read the tables (deltalake, no JVM) and the mailbox; update `findings`."""
    from audit.io.lake_read import read_frame

    completeness = read_frame(lake_of(settings), "completeness")
    findings.emails = saved_emails(mail_dir(settings))
    if completeness.empty:
        return
    findings.statuses = completeness["status"].value_counts().to_dict()
    drop = plan.drop
    window = completeness["window_start"].map(lambda t: int(t.timestamp() * 1000))
    dropped = completeness[
        (completeness["logical_topic"] == f"{drop.cluster}.{drop.topic}") & (window == drop.window_start_ms)
    ]
    findings.loss_rows = [
        (r.tier, int(r.expected), int(r.missing)) for r in dropped.itertuples() if r.status == "incomplete"
    ]
    stalled = completeness[completeness["origin_cluster"] == plan.stall.cluster]
    keys = stalled["logical_topic"] + "|" + window.loc[stalled.index].astype(str) + "|" + stalled["tier"]
    findings.lagging_keys |= set(keys[stalled["status"] == "lagging"])
    tier_status = read_frame(lake_of(settings), "tier_status")
    stalled_now = not tier_status.empty and bool(
        tier_status[(tier_status["origin_cluster"] == plan.stall.cluster) & (tier_status["tier"] == plan.hub)][
            "stalled"
        ]
        .astype("boolean")  # a declared flow's placeholder row has no stall flag yet
        .fillna(False)
        .any()
    )
    findings.stall_seen = findings.stall_seen or stalled_now or bool(findings.lagging_keys)
    # Sticky, and read from the mail too: a false loss that recovered a run later was still emailed.
    dropped_topic = f" LOSS {drop.cluster}.{drop.topic} at "
    emailed_loss = any(
        f" LOSS {plan.stall.cluster}." in subject and dropped_topic not in subject for _path, subject in findings.emails
    )
    findings.stall_counted_as_loss |= emailed_loss or bool((stalled["status"] == "incomplete").any())
    complete_now = set(keys[stalled["status"] == "complete"])
    # Recovered: no stall reported, and every window that lagged during the stall is complete now.
    findings.stall_recovered = findings.stall_seen and not stalled_now and findings.lagging_keys <= complete_now


def progress_line(began: float, findings: Findings, plan: PipelinePlan) -> str:
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(findings.statuses.items())) or "no windows judged yet"
    loss = (
        f"loss of {plan.drop.count} found at {', '.join(t for t, _e, m in findings.loss_rows)}"
        if findings.loss_rows
        else "loss not found yet"
    )
    stall = (
        ("stall seen as lag" + (", recovered" if findings.stall_recovered else ", still behind"))
        if findings.stall_seen
        else "stall not seen yet"
    )
    return (
        f"[{time.monotonic() - began:5.0f} s] windows: {statuses} | {loss} | {stall} | emails: {len(findings.emails)}"
    )


def summary(settings: Settings, plan: PipelinePlan, supervisor: Supervisor, findings: Findings, began: float) -> str:
    lines = ["", "kafka-audit demo", "================"]
    for cluster in settings.clusters:
        from audit.io.clients import bootstrap_servers

        lines.append(f"cluster {cluster.name:<10} {bootstrap_servers(settings, cluster.name)}")
    for name, service in supervisor.services.items():
        lines.append(
            f"service {name:<16} pid {service.process.pid:<8} {'running' if service.alive else 'exited'}  log {service.log_path}"
        )
    lines += [
        "",
        f"UI:        {ui_state(settings, plan, supervisor)}",
        f"Delta:     {lake_of(settings)}",
        f"Mailbox:   {mail_dir(settings)}",
    ]
    for path, subject in findings.emails:
        lines.append(f"  email {path.name}: {subject}")
    drop = plan.drop
    lines += [
        "",
        f"injected: {drop.count} messages of {drop.cluster}.{drop.topic} lost in the window "
        f"{iso(drop.window_start_ms, millis=False)} -> found: "
        + (
            ", ".join(f"{tier} missing {missing} of {expected}" for tier, expected, missing in findings.loss_rows)
            or "NOT YET"
        ),
        f"injected: replicator {plan.stall.cluster} -> {plan.hub} stalled "
        + (
            f"until the tables showed it ({findings.stall_ended_after_s:.0f} s)"
            if findings.stall_ended_after_s is not None
            else f"for {plan.stall.for_s:.0f} s"
        )
        + " -> "
        + (
            "shown as lag, then recovered"
            if findings.stall_recovered
            else "shown as lag"
            if findings.stall_seen
            else "NOT YET"
        )
        + ("; WRONGLY counted as loss" if findings.stall_counted_as_loss else ", never as loss"),
        "",
        f"ready in {time.monotonic() - began:.0f} s. Stop with Ctrl-C here, or `make down` from another shell.",
    ]
    return "\n".join(lines)


def ui_address(settings: Settings) -> str:
    return f"http://{settings.ui.host}:{settings.ui.port}"


def ui_state(settings: Settings, plan: PipelinePlan, supervisor: Supervisor) -> str:
    """The UI's address while it runs; never an address nothing listens on."""
    if not plan.with_ui:
        return "not started (--no-ui)"
    service = supervisor.services.get("ui")
    if service is None or not service.alive:
        return "NOT RUNNING: it exited" + (f", see {service.log_path}" if service else "")
    return ui_address(settings)


def end_stall(supervisor: Supervisor, plan: PipelinePlan, findings: Findings, stall_began: float) -> None:
    """Tell the stalled replicator to copy again (SIGUSR1 ends its pause) and note after how long."""
    supervisor.services[f"mirror-{plan.stall.cluster}"].process.send_signal(signal.SIGUSR1)
    findings.stall_ended_after_s = time.monotonic() - stall_began
    print(f"the stall shows in the tables: replicator {plan.stall.cluster} copies again", flush=True)


def start_fresh(settings: Settings) -> list[Path]:
    """Remove what an earlier demo left: its clusters' data, its lake and its mailbox. Each demo backfills
    the same hours of event time, so on an earlier demo's tables its counts would add up twice and
    every window would show as a loss. A lake outside the state directory is never touched."""
    state = Path(settings.state_dir).resolve()
    parts = [state / "clusters", mail_dir(settings).resolve()]
    lake = lake_of(settings)
    if not lake.on_object_store and Path(lake.root).resolve().is_relative_to(state):
        parts.append(Path(lake.root).resolve())
    removed = [part for part in parts if part.exists()]
    for part in removed:
        shutil.rmtree(part)
    return removed


# The tables are looked at this often (a read without a JVM), so "ready" is seen within seconds of the
# run that makes it so; a progress line is printed every PROGRESS_EVERY_S.
OBSERVE_EVERY_S = 2.0
PROGRESS_EVERY_S = 10.0


def demo_plan(args: argparse.Namespace, settings: Settings, *, hours: float) -> PipelinePlan:
    """The demo's pipeline over the configured clusters, with its two faults: the loss in one window of the
    backfill's `hours`, and the stall."""
    short = args.short
    regional, hub = hub_and_spokes(settings)
    return PipelinePlan(
        regional=regional,
        hub=hub,
        drop=DropPlan(
            regional[0], "orders", drop_window(hours, window_minutes=settings.window_minutes), args.drop_count
        ),
        # From the replicator's start, before the backfill: stopped part way through a backfill of random times,
        # its watermark would pass messages not yet copied (docs/operations.md, "The stall detector").
        # --short ends it as soon as the tables show it, so its length is only a bound.
        stall=StallPlan(regional[-1], after_s=0.0, for_s=300.0 if short else args.stall_for_s),
        # A run with nothing new is cheap, and a run that has something is waited for: the full demo starts
        # the next one 2 s after the last. --short (the tests, beside others on the CPU) leaves it more room.
        reconcile_interval_s=5.0 if short else 2.0,
        lake_trigger_s=5.0 if short else 10.0,
        stall_after_s=10.0 if short else 20.0,
        with_ui=not args.no_ui,
    )


def start_pipeline(
    supervisor: Supervisor, settings: Settings, plan: PipelinePlan, *, messages: int, hours: float, rate: float
) -> float:
    """The mailbox, the topics and every service, then the backfill and live traffic; returns when (monotonic)
    the stalled replicator started, which is when its stall began."""
    supervisor.start("mailbox", "mailbox")
    create_topics(settings, plan)
    print(
        f"starting services: counters, replicators ({', '.join(plan.regional)} -> {plan.hub}), lake, reconcile, UI ...",
        flush=True,
    )
    start_services(supervisor, settings, plan)
    stall_began = time.monotonic()
    if plan.with_ui:
        print(f"UI on {ui_address(settings)}: it shows the audit from the books' first run on", flush=True)
    print(
        f"backfilling {messages:,} audited messages per regional cluster over {hours:g} h of event time ...",
        flush=True,
    )
    backfill(supervisor, plan, messages=messages, hours=hours)
    start_live_traffic(supervisor, plan, rate=rate, duration_s=24 * 3600)
    return stall_began


def watch_until_ready(
    args: argparse.Namespace,
    settings: Settings,
    plan: PipelinePlan,
    supervisor: Supervisor,
    findings: Findings,
    stop: threading.Event,
    *,
    began: float,
    stall_began: float,
) -> None:
    """Observe the tables and the mailbox until the faults show (both found and the stall recovered with
    --exit-when-found), `stop` is set or --timeout-s passes, printing progress on the way."""
    deadline = time.monotonic() + args.timeout_s
    # Interactive: the summary comes once both faults are visible; the stall's recovery follows live.
    ready = findings.done if args.exit_when_found else findings.visible
    printed_at = -PROGRESS_EVERY_S
    while not stop.is_set() and time.monotonic() < deadline:
        observe(settings, plan, findings)
        if args.short and findings.stall_seen and findings.stall_ended_after_s is None:
            end_stall(supervisor, plan, findings, stall_began)
        done = ready(plan)
        if done or time.monotonic() - printed_at >= PROGRESS_EVERY_S:
            print(progress_line(began, findings, plan), flush=True)
            printed_at = time.monotonic()
        if done:
            break
        stop.wait(OBSERVE_EVERY_S)


def run(args: argparse.Namespace, settings: Settings) -> int:
    began = time.monotonic()
    messages = 6000 if args.short else args.messages
    hours = 1.0 if args.short else args.backfill_hours
    stop_leftovers(settings.state_dir)
    removed = start_fresh(settings)
    if removed:
        print(f"removed an earlier demo's state: {', '.join(str(p) for p in removed)}", flush=True)
    clusters = local_clusters(settings)
    print("starting local Kafka clusters ...", flush=True)
    clusters.up()
    config = write_demo_config(settings)
    from audit.settings import load_settings

    settings = load_settings(config)
    plan = demo_plan(args, settings, hours=hours)
    supervisor = Supervisor(settings.state_dir, config=config)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        stall_began = start_pipeline(supervisor, settings, plan, messages=messages, hours=hours, rate=args.rate)
        findings = Findings()
        watch_until_ready(args, settings, plan, supervisor, findings, stop, began=began, stall_began=stall_began)
        print(summary(settings, plan, supervisor, findings, began), flush=True)
        if args.exit_when_found or stop.is_set():
            return 0 if findings.done(plan) else 1
        while not stop.wait(30.0):  # keep showing progress (the stall's recovery, live windows) until Ctrl-C
            observe(settings, plan, findings)
            print(progress_line(began, findings, plan), flush=True)
        return 0
    finally:
        if args.exit_when_found or stop.is_set():
            print("stopping services and clusters ...", flush=True)
            supervisor.stop_all()
            clusters.down()
