"""Session-wide real infrastructure: local Kafka clusters started once, torn down at the end.

Every name a test creates (topics, groups) is unique, so tests never depend on each other's data
or on a fixed port.
"""

from __future__ import annotations

import fcntl
import json
import os
import uuid
from itertools import zip_longest
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from audit.io.clients import ensure_topics
from audit.io.spark import DRIVER_JAVA_OPTIONS_ENV
from audit.local.clusters import LocalClusters
from audit.local.processes import PORT_SLOT_ENV

SESSION_CLUSTERS = ("dc1", "aggregate")

pytest_plugins = ["tests.cpu_report"]  # per test and per run: where the time goes (.kaudit/test-cpu.txt)

# Property tests judge results, not speed: beside the suite's other workers on two cores one example can take
# longer than Hypothesis' default deadline of 200 ms, though it takes a millisecond or two alone, which
# fails the test though nothing is wrong.
hypothesis_settings.register_profile("suite", deadline=None)
hypothesis_settings.load_profile("suite")

# A test that uses one of these fixtures needs that infrastructure: it is marked so, and `make
# test-fast` (-m "not kafka and not spark and not browser") leaves it out without a marker by hand.
INFRASTRUCTURE_FIXTURES = {
    "local_clusters": "kafka",
    "topic_factory": "kafka",
    "settings_factory": "kafka",
    "spark": "spark",
    "object_store": "object_store",
    "s3_lake": "object_store",
}


# The suite's Spark drivers compile with C1 only (and room for its code): three test processes share two cores,
# and a test's queries run too few times for C2's faster code to repay its compiling.
TEST_DRIVER_JIT_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m"


def pytest_configure(config) -> None:
    # Parallel test workers (pytest-xdist: gw0, gw1, ...) start clusters at the same time: each draws its
    # ports from its own block, the run's slot plus one plus its number, and the processes it starts inherit it.
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        run_slot = int(os.environ.get(PORT_SLOT_ENV, "0"))
        os.environ[PORT_SLOT_ENV] = str(run_slot + int(worker.removeprefix("gw")) + 1)
    # Every Spark driver of the suite, its own and those of the CLI processes it starts, compiles for tests.
    os.environ[DRIVER_JAVA_OPTIONS_ENV] = TEST_DRIVER_JIT_OPTIONS


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        for fixture in set(item.fixturenames) & INFRASTRUCTURE_FIXTURES.keys():
            item.add_marker(INFRASTRUCTURE_FIXTURES[fixture])
    items[:] = in_schedule_order(items)


def in_schedule_order(items: list) -> list:
    """The order parallel workers take tests in. Slow tests start early, so the workers end together: those that
    mostly wait (on brokers, kills, timeouts) first, with the longest of those that need Spark; the other Spark ones,
    which saturate the cores, are spread over the first half of the run, longest first, where they overlap waiting
    tests instead of each other. Between them whole modules, alternating between those that run Spark (CPU-bound)
    and those that mostly wait on brokers, processes and timeouts, so the waiting overlaps the computing: in
    collection order, the waiting modules come one after the other and leave the cores half idle for minutes.
    Tests that need neither come last and fill the tail."""
    slow = [item for item in items if item.get_closest_marker("slow")]
    heavy = sorted((item for item in slow if item.get_closest_marker("spark")), key=lambda item: -_minutes(item))
    modules: dict[str, list] = {}
    for item in items:
        if not item.get_closest_marker("slow"):
            modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    by_kind: dict[str, list[list]] = {"spark": [], "kafka": [], "rest": []}
    for tests in modules.values():
        kind = next((m for m in ("spark", "kafka") if any(t.get_closest_marker(m) for t in tests)), "rest")
        by_kind[kind].append(tests)
    alternating = [tests for pair in zip_longest(by_kind["spark"], by_kind["kafka"]) for tests in pair if tests]
    body = [test for tests in [*alternating, *by_kind["rest"]] for test in tests]
    first = heavy[:1] + [item for item in slow if item not in heavy]
    return _shared_runs_last(first + _spread(heavy[1:], body, over=len(body) // 2))


def _minutes(item) -> float:
    """What a test's `slow(minutes=N)` marker says it runs for on an idle machine (1 when it does not say)."""
    return item.get_closest_marker("slow").kwargs.get("minutes", 1)


def _spread(spread: list, among: list, over: int) -> list:
    """`among` with the tests of `spread` put in at even steps over its first `over` tests."""
    step = over // (len(spread) + 1) if spread else 0
    result = list(among)
    for index, item in reversed(list(enumerate(spread, start=1))):
        result.insert(index * step, item)
    return result


def _shared_runs_last(items: list) -> list:
    """A module marked `shared_run` computes one thing for all its tests, whichever workers run them: its first
    test stays in place and the others go last. Dealt one after another, they would have a second
    worker wait on the first one's lock as long as the shared run takes (the notebook's: about a minute)."""
    seen: set[str] = set()
    first, later = [], []
    for item in items:
        module = item.nodeid.split("::")[0]
        if item.get_closest_marker("shared_run") and module in seen:
            later.append(item)
        else:
            seen.add(module)
            first.append(item)
    return first + later


def cache_dir() -> Path:
    return Path(os.environ.get("KAUDIT_CACHE_DIR", "~/.cache/kafka-audit")).expanduser()


def run_dir(tmp_path_factory) -> Path:
    """The directory of this whole test run: under pytest-xdist, the one every worker's own directory is in."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


SESSION_STATE = "kaudit-state"  # in run_dir: the session clusters' state


@pytest.fixture(scope="session")
def state_dir(tmp_path_factory) -> Path:
    path = run_dir(tmp_path_factory) / SESSION_STATE
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session")
def local_clusters(state_dir):
    """Two real single-node KRaft clusters, `dc1` and `aggregate`, on free loopback ports.

    One pair serves all the run's workers, as every topic and group a test makes is its own: the first worker
    to need it starts it, the others find it running (a pair per worker would cost four more brokers' start
    and their idle CPU over the run). No test stops or restarts it. A worker may end while another
    still uses it, so the run's controller stops it (`pytest_sessionfinish`); without workers, this fixture."""
    clusters = LocalClusters(SESSION_CLUSTERS, state_dir=state_dir, cache_dir=cache_dir())
    try:
        with open(state_dir / "up.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            clusters.up()
        yield clusters
    finally:
        if not os.environ.get("PYTEST_XDIST_WORKER"):
            clusters.down()


def pytest_sessionfinish(session) -> None:
    """The controller of a run with workers stops the session clusters they shared (see local_clusters)."""
    if hasattr(session.config, "workerinput") or not session.config.getoption("numprocesses", None):
        return
    state = session.config._tmp_path_factory.getbasetemp() / SESSION_STATE  # the workers' run_dir
    if state.is_dir():
        LocalClusters(SESSION_CLUSTERS, state_dir=state, cache_dir=cache_dir()).down()


@pytest.fixture
def unique_name(request):
    """A factory of names no other test uses: `<prefix>-<test>-<random>`."""

    def make(prefix: str = "t") -> str:
        test = request.node.name.split("[")[0].replace("_", "-")[:40]
        return f"{prefix}-{test}-{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture
def topic_factory(local_clusters, unique_name):
    """Create a fresh topic on a session cluster: `topic_factory("dc1", partitions=3)` -> name."""

    def make(cluster: str, *, partitions: int = 1, config: dict | None = None, name: str | None = None) -> str:
        topic = name or unique_name("topic")
        bootstrap = local_clusters[cluster].bootstrap_servers
        ensure_topics({"bootstrap.servers": bootstrap}, {topic: partitions}, topic_configs={topic: config or {}})
        return topic

    return make


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One local Spark session with Delta and the Kafka source for the whole test session."""
    from audit.io.spark import spark_session

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = spark_session(
        app_name="kaudit-tests",
        cache_dir=cache_dir(),
        conf={
            "spark.sql.warehouse.dir": str(warehouse),
            # Tests run tiny tables, where each task generating code for its projections (a regex pass over the
            # code, even when the class is cached) costs more than Spark's interpreted expressions: 12 % less
            # CPU for test_reconcile.py. Whole-stage code is still generated; the demo, the soak and the benches
            # run Spark's default (FALLBACK), which a 10,800-record increment needs (16 s against 22 s).
            "spark.sql.codegen.factoryMode": "NO_CODEGEN",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def object_store(tmp_path_factory):
    """A real S3-compatible store (SeaweedFS, `make setup` builds it) on free loopback ports, with one SigV4
    identity: one per test process, as it starts in a few seconds and costs little while idle."""
    from audit.local.object_store import start_object_store

    store = start_object_store(tmp_path_factory.mktemp("object-store"), cache_dir())
    yield store
    store.stop()


LAKE_BUCKET = "kaudit-lake"


@pytest.fixture(scope="session")
def lake_bucket(object_store) -> str:
    """The bucket the tests' S3 lakes share, created once per store."""
    return object_store.create_bucket(LAKE_BUCKET)


@pytest.fixture
def s3_lake(lake_bucket):
    """A factory of fresh lake roots on the object store: `s3_lake()` -> `s3a://kaudit-lake/<uuid>`."""

    def make() -> str:
        return f"s3a://{lake_bucket}/{uuid.uuid4().hex}"

    return make


@pytest.fixture
def settings_factory(local_clusters, unique_name, tmp_path):
    """Settings for the session clusters (dc1, aggregate) with this test's own audit topic and lake."""
    from audit.settings import ClusterSettings, Settings

    def make(**overrides) -> Settings:
        clusters = tuple(
            ClusterSettings(name=name, bootstrap_servers=local_clusters[name].bootstrap_servers, local=False)
            for name in SESSION_CLUSTERS
        )
        values = dict(
            clusters=clusters,
            audit_topic=unique_name("_audit").replace("-", "_"),
            state_dir=tmp_path / "state",
            cache_dir=cache_dir(),
            lake_path=str(tmp_path / "lake"),
        )
        values.update(overrides)
        return Settings(**values)

    return make


def write_config(settings, path: Path) -> Path:
    """`settings` as a TOML file a `kaudit` subprocess can load (clusters by address, no secrets)."""
    lines = [
        f'state_dir = "{settings.state_dir}"',
        f'cache_dir = "{settings.cache_dir}"',
        f'lake_path = "{settings.lake_path}"',
        f'audit_topic = "{settings.audit_topic}"',
        f"window_minutes = {settings.window_minutes}",
        f"grace_s = {settings.grace_s}",
        f"flush_interval_s = {settings.flush_interval_s}",
        # The topics a `kaudit` subprocess selects: on the session clusters every test's topics are there, and a
        # service selecting all of them would copy, land or count other tests' traffic.
        "[topics]",
        f"include = {json.dumps(list(settings.topics.include))}",
        f"exclude = {json.dumps(list(settings.topics.exclude))}",
    ]
    for cluster in settings.clusters:
        lines += [
            "[[clusters]]",
            f'name = "{cluster.name}"',
            f'bootstrap_servers = "{cluster.bootstrap_servers}"',
            "local = false",
        ]
    for flow in settings.flows:
        topics = ", ".join(f"'{pattern}'" for pattern in flow.topics)
        lines += ["[[flows]]", f'from = "{flow.source}"', f'to = "{flow.target}"', f"topics = [{topics}]"]
    path.write_text("\n".join(lines) + "\n")
    return path
