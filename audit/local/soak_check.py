"""The soak's verdict: ground truth read from the clusters and the lake, checked against the tables.

Ground truth is what really happened, measured without the audit pipeline: the messages each
topic holds (read from its partitions, bucketed by the message timestamp like every tier does),
the rows the lake landed, and what the producers say they got acknowledged. Each check is one
invariant in docs/reliability.md (1 to 7; invariant 8 is soak_recovery.py's) read against that truth;
`Verdict.report()` prints the lot.

The checks are pure functions over pandas frames and Counters, so a unit test can hand them a
wrong table and see them fail.
"""

from __future__ import annotations

import logging
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pandas as pd

from audit.contract.completeness import partition_gaps
from audit.io.clients import watermarks
from audit.io.lake import lake_of

log = logging.getLogger(__name__)
COMMITTED = re.compile(r"([\d,]+) messages committed")  # in the transactional producer's summary line

# (logical_topic, window_start_ms, tier) -> {partition: messages}
Truth = dict[tuple[str, int, str], Counter]


@dataclass(frozen=True)
class Check:
    invariant: str  # its number in docs/reliability.md, "1".."11" ("3/4": one check of both)
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class Expectations:
    """What the soak did on purpose, to compare with what the tables say."""

    regional: tuple[str, ...]
    hub: str
    acked: Mapping[str, int]  # regional cluster -> messages its producers got acknowledged
    drop_logical_topic: str  # e.g. dc1.orders
    drop_window_ms: int
    drop_count: int
    malformed_markers: tuple[str, ...]  # text inside each malformed audit record injected
    transactional_topic: str | None = None  # logical topic a plain transactional producer wrote (no producer tier)
    transactions: str = ""  # what that producer said it committed and aborted
    exactly_once: frozenset[str] = frozenset()  # origins whose replicator ran --exactly-once: no duplicate on the hub


def origin_of(logical_topic: str) -> str:
    """The cluster a logical topic (`<origin>.<topic>`, e.g. dc1.orders) was first produced to."""
    return logical_topic.split(".")[0]


def window_ms(values: pd.Series) -> pd.Series:
    return values.map(lambda t: int(pd.Timestamp(t).timestamp() * 1000))


def topic_truth(
    consumer_config: Mapping[str, str], topic: str, window_minutes: int, timeout_s: float = 120.0
) -> Counter:
    """Messages in `topic` per (window_start_ms, partition), read from the first to the last offset."""
    import time

    from confluent_kafka import Consumer, TopicPartition

    from audit.contract.windows import window_start

    consumer = Consumer(
        {
            **consumer_config,
            "group.id": f"kaudit-soak-truth-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            # What every tier must count (invariant 7): aborted transactions are in the log, never in the truth.
            "isolation.level": "read_committed",
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        ends, assigned = {}, []
        for partition in partitions:
            low, high = watermarks(consumer, topic, partition)
            if high > low:
                ends[partition] = high
                assigned.append(TopicPartition(topic, partition, low))
        counts: Counter = Counter()
        if not assigned:
            return counts
        consumer.assign(assigned)
        deadline = time.monotonic() + timeout_s
        while ends and time.monotonic() < deadline:
            for message in consumer.consume(5000, timeout=1.0):
                if message.error():
                    continue
                counts[(window_start(message.timestamp()[1], window_minutes), message.partition())] += 1
                if message.offset() + 1 >= ends.get(message.partition(), 0):
                    ends.pop(message.partition(), None)
            # A read_committed reader stops short of the end when markers or aborted batches close the log.
            for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
                if tp.offset >= ends[tp.partition]:
                    ends.pop(tp.partition)
        if ends:
            raise TimeoutError(f"reading {topic}: partitions {sorted(ends)} not read to their end in {timeout_s:.0f} s")
        return counts
    finally:
        consumer.close()


def add_truth(truth: Truth, logical_topic: str, tier: str, counts: Counter) -> None:
    for (window, partition), n in counts.items():
        truth.setdefault((logical_topic, window, tier), Counter())[partition] += n


def pipeline_truth(
    settings, origin_topics: list[tuple[str, str]], hub: str, window_minutes: int
) -> tuple[Truth, list[str]]:
    """The truth of each (origin cluster, topic) on its origin, of its copy on the hub, and of the bronze table;
    and the hub's topic names."""
    from audit.io.clients import client_config
    from audit.io.lake_read import read_frame

    truth: Truth = {}
    hub_topics = []
    for cluster, topic in origin_topics:
        logical = f"{cluster}.{topic}"
        add_truth(truth, logical, cluster, topic_truth(client_config(settings, cluster), topic, window_minutes))
        add_truth(truth, logical, hub, topic_truth(client_config(settings, hub), logical, window_minutes))
        hub_topics.append(logical)
    bronze = read_frame(lake_of(settings), "bronze", columns=["topic", "partition", "window_start"])
    truth.update(bronze_truth(bronze, hub_topics))
    return truth, hub_topics


def bronze_truth(bronze: pd.DataFrame, topics: Iterable[str]) -> Truth:
    """Rows the lake landed per (logical topic, window, partition), tier `lake` (bronze topics are hub names)."""
    truth: Truth = {}
    wanted = set(topics)
    frame = bronze[bronze["topic"].isin(wanted)]
    if frame.empty:
        return truth
    grouped = frame.assign(w=window_ms(frame["window_start"])).groupby(["topic", "w", "partition"]).size()
    for (topic, window, partition), n in grouped.items():
        truth.setdefault((topic, int(window), "lake"), Counter())[int(partition)] += int(n)
    return truth


def _map(value) -> dict[int, int] | None:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    return {int(k): int(v) for k, v in (value.items() if isinstance(value, Mapping) else value)}


def check_all(
    tier_counts: pd.DataFrame,
    completeness: pd.DataFrame,
    alerts: pd.DataFrame,
    rejects: pd.DataFrame,
    truth: Truth,
    expect: Expectations,
) -> list[Check]:
    """Every invariant, against the truth; see the module doc."""
    counts = (
        tier_counts.assign(w=window_ms(tier_counts["window_start"])) if len(tier_counts) else tier_counts.assign(w=[])
    )
    rows = (
        completeness.assign(w=window_ms(completeness["window_start"]))
        if len(completeness)
        else completeness.assign(w=[])
    )
    producer = {(r.logical_topic, int(r.w)): r for r in counts[counts["tier"] == "producer"].itertuples()}
    checks = [
        _producer_counts_match_acks(counts, expect),
        _origin_holds_what_producers_sent(producer, truth, expect),
        _every_tier_counts_what_it_holds(counts, truth),
        _lake_holds_what_hub_holds(truth, expect),
        _reported_gaps_match_truth(rows, producer, truth),
        _injected_loss_reported_exactly(rows, truth, expect),
        _duplicates_never_complete(rows),
        _no_mismatch_without_a_change(rows),
        _no_loss_without_a_loss(rows, alerts, truth, producer),
        _malformed_records_rejected(rejects, expect),
    ]
    if expect.transactional_topic:
        checks.append(_transactional_topic_complete(rows, truth, expect))
    if expect.exactly_once:
        checks.append(_no_duplicate_on_the_hub(truth, expect))
    return checks


def _producer_counts_match_acks(counts: pd.DataFrame, expect: Expectations) -> Check:
    produced = counts[counts["tier"] == "producer"].groupby("origin_cluster")["count"].sum().to_dict()
    wrong = {c: (int(produced.get(c, 0)), n) for c, n in expect.acked.items() if int(produced.get(c, 0)) != n}
    detail = ", ".join(f"{c}: producer tier {p:,} vs acked {a:,}" for c, (p, a) in wrong.items()) or ", ".join(
        f"{c}: {n:,}" for c, n in expect.acked.items()
    )
    return Check("1", "producer tier counts = messages the producers got acknowledged", not wrong, detail)


def _origin_holds_what_producers_sent(producer: dict, truth: Truth, expect: Expectations) -> Check:
    bad = []
    keys = {(lt, w) for (lt, w, tier) in truth if tier == origin_of(lt)} | set(producer)
    for logical_topic, window in sorted(keys):
        origin = origin_of(logical_topic)
        held = dict(truth.get((logical_topic, window, origin), Counter()))
        row = producer.get((logical_topic, window))
        if row is None and logical_topic == expect.transactional_topic:
            continue  # not audited: its origin cluster is its reference
        sent = _map(row.by_partition) if row is not None else {}
        if sent is None:
            sent_total = int(row.count)
            if sent_total != sum(held.values()):
                bad.append(f"{logical_topic}@{window}: producer {sent_total} vs held {sum(held.values())}")
        elif {p: n for p, n in sent.items() if n} != {p: n for p, n in held.items() if n}:
            bad.append(f"{logical_topic}@{window}: producer {sent} vs held {held}")
    return Check(
        "1",
        "each origin cluster holds exactly what its producers sent, per window and partition",
        not bad,
        "; ".join(bad[:5]) or f"{len(keys)} topic-windows exact",
    )


def _every_tier_counts_what_it_holds(counts: pd.DataFrame, truth: Truth) -> Check:
    counted = {
        (r.logical_topic, int(r.w), r.tier): int(r.count) for r in counts[counts["tier"] != "producer"].itertuples()
    }
    held = {key: sum(c.values()) for key, c in truth.items()}
    bad = [
        f"{lt}@{w} {tier}: counted {counted.get((lt, w, tier), 0)}, holds {held.get((lt, w, tier), 0)}"
        for (lt, w, tier) in sorted(set(counted) | set(held))
        if counted.get((lt, w, tier), 0) != held.get((lt, w, tier), 0)
    ]
    return Check(
        "2",
        "every tier's count = what its topic (or the lake) really holds, despite the kills",
        not bad,
        "; ".join(bad[:5]) or f"{len(held)} tier-windows exact",
    )


def _lake_holds_what_hub_holds(truth: Truth, expect: Expectations) -> Check:
    bad = []
    for (lt, w, tier), held in truth.items():
        if tier == expect.hub:
            landed = truth.get((lt, w, "lake"), Counter())
            if {p: n for p, n in landed.items() if n} != {p: n for p, n in held.items() if n}:
                bad.append(f"{lt}@{w}: hub {dict(held)} vs lake {dict(landed)}")
    lake_only = [key for key in truth if key[2] == "lake" and (key[0], key[1], expect.hub) not in truth]
    bad += [f"{lt}@{w}: in the lake, not on the hub" for lt, w, _ in lake_only]
    return Check(
        "2",
        "the lake landed every message of the hub once (no loss, no duplicate row)",
        not bad,
        "; ".join(bad[:5]) or "bronze = hub topics, per window and partition",
    )


def _true_gaps(truth: Truth, producer: dict, logical_topic: str, window: int, tier: str) -> tuple[int, int]:
    row = producer.get((logical_topic, window))
    sent = (_map(row.by_partition) if row is not None else None) or dict(
        truth.get((logical_topic, window, origin_of(logical_topic)), {})
    )
    return partition_gaps(sent, dict(truth.get((logical_topic, window, tier), {})))


def _reported_gaps_match_truth(rows: pd.DataFrame, producer: dict, truth: Truth) -> Check:
    bad = []
    for r in rows[rows["tier"] != "producer"].itertuples():
        missing, duplicated = _true_gaps(truth, producer, r.logical_topic, int(r.w), r.tier)
        if (int(r.missing), int(r.duplicated)) != (missing, duplicated):
            bad.append(
                f"{r.logical_topic}@{int(r.w)} {r.tier}: reported missing {int(r.missing)} dup {int(r.duplicated)}, "
                f"true missing {missing} dup {duplicated}"
            )
    return Check(
        "3/4",
        "reported missing and duplicated = the true gaps, in every window and tier",
        not bad,
        "; ".join(bad[:5]) or f"{len(rows)} completeness rows exact",
    )


def injected_loss(truth: Truth, expect: Expectations) -> int:
    """The messages the drop hook dropped: the first K of its window that it read, or all the window held."""
    key = (expect.drop_logical_topic, expect.drop_window_ms, origin_of(expect.drop_logical_topic))
    return min(expect.drop_count, sum(truth.get(key, Counter()).values()))


def _injected_loss_reported_exactly(rows: pd.DataFrame, truth: Truth, expect: Expectations) -> Check:
    key = (expect.drop_logical_topic, expect.drop_window_ms)
    hub_held = sum(truth.get((*key, expect.hub), Counter()).values())
    origin_held = sum(truth.get((*key, origin_of(expect.drop_logical_topic)), Counter()).values())
    really_lost = origin_held - hub_held
    injected = injected_loss(truth, expect)
    in_window = rows[(rows["logical_topic"] == key[0]) & (rows["w"] == key[1])]
    reported = {r.tier: int(r.missing) for r in in_window.itertuples()}
    elsewhere = int(rows[~((rows["logical_topic"] == key[0]) & (rows["w"] == key[1]))]["missing"].sum())
    ok = (
        injected > 0
        and really_lost == injected
        and reported.get(expect.hub) == injected
        and reported.get("lake") == injected
        and elsewhere == 0
    )
    held_only = ", all the window held at the origin" if injected < expect.drop_count else ""
    detail = (
        f"injected {injected}{held_only} in {key[0]}@{key[1]} (the hub really lacks {really_lost}); reported missing "
        f"{expect.hub} {reported.get(expect.hub)}, lake {reported.get('lake')}; missing reported elsewhere {elsewhere}"
    )
    return Check("3", "the injected loss is reported as exactly K missing, in its window only", ok, detail)


def _duplicates_never_complete(rows: pd.DataFrame) -> Check:
    hidden = rows[(rows["status"] == "complete") & ((rows["missing"] > 0) | (rows["duplicated"] > 0))]
    final_dup = rows[
        rows["final"].fillna(False) & (rows["duplicated"] > 0) & ~rows["status"].isin(["over", "incomplete"])
    ]
    final_loss = rows[rows["final"].fillna(False) & (rows["missing"] > 0) & (rows["status"] != "incomplete")]
    bad = [
        f"{r.logical_topic}@{int(r.w)} {r.tier}: {r.status} with missing {int(r.missing)} dup {int(r.duplicated)}"
        for frame in (hidden, final_dup, final_loss)
        for r in frame.itertuples()
    ]
    dups = int(rows["duplicated"].sum())
    return Check(
        "4",
        "duplicates show as over (never complete) and never hide a loss",
        not bad,
        "; ".join(bad[:5]) or f"{dups} duplicates reported, none shown as complete",
    )


def _no_mismatch_without_a_change(rows: pd.DataFrame) -> Check:
    """The soak changes no message's content: every digest agrees, whatever was killed or duplicated."""
    bad = [f"{r.logical_topic}@{int(r.w)} {r.tier}" for r in rows[rows["status"] == "mismatch"].itertuples()]
    detail = "; ".join(bad[:5]) or f"{len(rows)} completeness rows, no content mismatch"
    return Check("11", "no window is a content mismatch where no content was changed", not bad, detail)


def _no_loss_without_a_loss(rows: pd.DataFrame, alerts: pd.DataFrame, truth: Truth, producer: dict) -> Check:
    bad = []
    for r in rows[rows["status"] == "incomplete"].itertuples():
        if _true_gaps(truth, producer, r.logical_topic, int(r.w), r.tier)[0] == 0:
            bad.append(f"{r.logical_topic}@{int(r.w)} {r.tier}: incomplete without a true loss")
    final = {(r.logical_topic, int(r.w), r.tier): bool(r.final) for r in rows.itertuples()}
    losses = alerts[alerts["kind"] == "loss"] if len(alerts) else alerts
    for a in losses.assign(w=window_ms(losses["window_start"])).itertuples() if len(losses) else ():
        key = (a.logical_topic, int(a.w), a.tier)
        if not final.get(key, False) or _true_gaps(truth, producer, *key)[0] == 0:
            bad.append(f"loss alert {key}: final {final.get(key)}, true loss {_true_gaps(truth, producer, *key)[0]}")
    lagging = int((rows["status"] == "lagging").sum()) + int((rows["status"] == "pending").sum())
    return Check(
        "5",
        "no window is called a loss (or alerted) unless final and truly short",
        not bad,
        "; ".join(bad[:5]) or f"{len(losses)} loss alerts, all true; {lagging} rows still lagging/pending",
    )


def _transactional_topic_complete(rows: pd.DataFrame, truth: Truth, expect: Expectations) -> Check:
    """Every window of the transactional topic ends final and judged: complete, or (at least once, after a
    replicator kill) over by exactly its true duplicates, which check 3/4 holds; never lagging or short.
    Its origin holds exactly what the producer committed: aborted messages are in no tier's count."""
    topic = expect.transactional_topic
    held = {
        tier: sum(sum(c.values()) for (lt, _w, t), c in truth.items() if lt == topic and t == tier)
        for tier in (origin_of(topic), expect.hub, "lake")
    }
    exactly_once = origin_of(topic) in expect.exactly_once
    judged = {"complete"} if exactly_once else {"complete", "over"}
    mine = rows[rows["logical_topic"] == topic]
    not_judged = mine[~mine["status"].isin(judged) | ~mine["final"].fillna(False)]
    bad = [f"{topic}@{int(r.w)} {r.tier}: {r.status}, final {r.final}" for r in not_judged.itertuples()]
    origin = held[origin_of(topic)]
    if not len(mine) or any(n < origin for n in held.values()) or (exactly_once and len(set(held.values())) > 1):
        bad.append(f"held per tier {held}, {len(mine)} completeness rows")
    committed = COMMITTED.search(expect.transactions)
    if committed and int(committed.group(1).replace(",", "")) != origin:
        bad.append(f"the producer committed {committed.group(1)} messages, the origin holds {origin}")
    return Check(
        "7",
        "a transactional topic (commits and aborts) ends complete and final in every window of every tier",
        not bad,
        "; ".join(bad[:5]) or f"{len(mine)} rows judged; read_committed holds {held}; producer: {expect.transactions}",
    )


def _no_duplicate_on_the_hub(truth: Truth, expect: Expectations) -> Check:
    doubled = []
    for (lt, w, tier), held in truth.items():
        if tier == expect.hub and origin_of(lt) in expect.exactly_once:
            origin = truth.get((lt, w, origin_of(lt)), Counter())
            doubled += [
                f"{lt}@{w} partition {p}: hub {n} > origin {origin[p]}" for p, n in held.items() if n > origin[p]
            ]
    origins = sorted(expect.exactly_once)
    hub = sum(sum(c.values()) for (lt, _w, tier), c in truth.items() if tier == expect.hub and origin_of(lt) in origins)
    return Check(
        "4",
        "exactly-once replicators: the hub holds no duplicate, whatever was killed",
        not doubled,
        "; ".join(doubled[:5]) or f"{hub:,} messages on the hub from {', '.join(origins)}, none twice",
    )


def _malformed_records_rejected(rejects: pd.DataFrame, expect: Expectations) -> Check:
    raw = rejects["raw"].fillna("").tolist() if len(rejects) else []
    missing = [m for m in expect.malformed_markers if not any(m in text for text in raw)]
    reasons = (
        sorted({r for r, t in zip(rejects["reason"], raw) if any(m in t for m in expect.malformed_markers)})
        if raw
        else []
    )
    return Check(
        "6",
        "each malformed audit record is in audit_rejects with its reason",
        not missing,
        f"not rejected: {missing}"
        if missing
        else f"{len(expect.malformed_markers)} rejected: " + "; ".join(reasons)[:300],
    )


@dataclass
class Verdict:
    checks: list[Check]
    facts: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def report(self) -> str:
        lines = [
            f"{'PASS' if c.ok else 'FAIL'}  invariant {c.invariant:<4} {c.name}\n        {c.detail}"
            for c in self.checks
        ]
        return "\n".join(lines)


def gap_totals(rows: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Missing and duplicated reported, summed per tier."""
    totals: dict[str, dict[str, int]] = defaultdict(lambda: {"missing": 0, "duplicated": 0})
    for tier, group in rows.groupby("tier"):
        totals[tier] = {"missing": int(group["missing"].sum()), "duplicated": int(group["duplicated"].sum())}
    return dict(totals)


def render(verdict) -> str:
    facts = verdict.facts
    reported = facts["reported_by_tier"]
    lines = [
        "",
        "kafka-audit soak report",
        "=======================",
        f"seed {facts['seed']}, {facts['minutes']:g} min of live load at {facts['rate_per_cluster']:g} msg/s per regional cluster",
        f"messages produced (acked): {facts['messages_acked_total']:,} "
        + "("
        + ", ".join(f"{c} {n:,}" for c, n in facts["messages_acked"].items())
        + f"); send failures {sum(facts['send_failed'].values())}",
        "faults injected: "
        + ", ".join(f"{k} {n}" for k, n in facts["faults_by_kind"].items())
        + f"; malformed audit records {facts['malformed_records_injected']}",
        f"unplanned service exits (restarted): {len(facts['unplanned_exits'])}",
    ]
    lines += [f"    {text}" for text in facts["unplanned_exits"]]
    lines += [
        f"loss injected: {facts['loss_injected']} in {facts['loss_window']}; reported missing: "
        + ", ".join(f"{tier} {r['missing']}" for tier, r in sorted(reported.items())),
        f"duplicates (at-least-once replicator restarts): true on the hub {facts['duplicates_on_hub_true']}, reported "
        + ", ".join(f"{tier} {r['duplicated']}" for tier, r in sorted(reported.items())),
        f"transactional load (no producer tier): {facts.get('transactional_load', '')}",
        "window statuses: " + ", ".join(f"{s} {n}" for s, n in sorted(facts["statuses"].items())),
        "phases: " + ", ".join(f"{k} {v:.0f} s" for k, v in facts["phases_s"].items()),
        f"recovery after faults (fault end to the service's next progress): p50 {facts['recovery']['p50_s']} s, "
        f"max {facts['recovery']['max_s']} s over {facts['recovery']['measured']}",
        "",
        "invariants:",
        verdict.report(),
        "",
        f"RESULT: {'every invariant held' if verdict.ok else 'INVARIANT FAILED'}",
    ]
    return "\n".join(lines)
