"""The analyst notebook, executed for real: sample Delta tables with seeded faults, a real kernel, Spark and Delta.

The notebook runs once per module (its Spark session costs ~20 s) through notebooks/execute.py, the
same runner as `make notebook`; the tests then read the executed copy's outputs.
"""
from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from dashboards.sample import Duplicate, Lagging, Loss, Mismatch, sample_frames, write_frames
from tests.conftest import cache_dir, run_dir

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "completeness.ipynb"
RUNNER = ROOT / "notebooks" / "execute.py"

# One loss (payments, into aggregate), one duplicate (orders, into the lake), one lagging tier (clicks' lake),
# one changed message (orders' partition 1, into the aggregate, after the duplicate's window).
LOST_TOPIC, LOST_TIER, LOST_COUNT = "payments", "aggregate", 37
MISMATCH_WINDOW = 7
FAULTS = [Loss(LOST_TOPIC, LOST_TIER, 3, LOST_COUNT), Duplicate("orders", "lake", 5, 9),
          Lagging("clicks", "lake", behind_minutes=45, lag=5200), Mismatch("orders", "aggregate", MISMATCH_WINDOW, 1)]

BRONZE_PER_WINDOW = 2

pytestmark = [pytest.mark.spark, pytest.mark.shared_run]


def bronze(completeness):
    """BRONZE_PER_WINDOW lake messages in every window of every topic (the lake's topic is the logical topic)."""
    windows = completeness[["logical_topic", "window_start"]].drop_duplicates()
    return pd.DataFrame([
        dict(topic=w.logical_topic, partition=0, offset=i, value=b"m", timestamp=w.window_start, timestamp_type=0,
             audit_time=w.window_start, window_start=w.window_start, batch_id=0, date=w.window_start.date())
        for i, w in enumerate(windows.itertuples(index=False)) for _ in range(BRONZE_PER_WINDOW)
    ])


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """(completed process, executed notebook) of one run over sample tables.

    Run once for the whole test run: `make test`'s workers each get some of this module's tests, and the
    first to need the notebook executes it while the others wait on the lock, then read what it left."""
    work = run_dir(tmp_path_factory) / "notebook"  # shared by this run's workers
    outcome, output = work / "outcome.json", work / "completeness.executed.ipynb"
    with open(f"{work}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not outcome.exists():
            done = execute_notebook(work, output)
            outcome.write_text(json.dumps({"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}))
    done = subprocess.CompletedProcess(args=[str(RUNNER)], **json.loads(outcome.read_text()))
    executed_nb = nbformat.read(output, as_version=4) if output.exists() else None
    return done, executed_nb


def execute_notebook(work: Path, output: Path) -> subprocess.CompletedProcess:
    work.mkdir(parents=True, exist_ok=True)
    lake = work / "lake"
    frames = sample_frames(now=datetime.now(UTC), topics=("orders", "payments", "clicks"), faults=FAULTS)
    write_frames(str(lake), {**frames, "bronze": bronze(frames["completeness"])})
    env = {key: value for key, value in os.environ.items() if not key.startswith("KAUDIT_")}
    env.update(KAUDIT_LAKE_PATH=str(lake), KAUDIT_STATE_DIR=str(work / "state"), KAUDIT_CACHE_DIR=str(cache_dir()),
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               # the kernel imports this checkout, not whichever one the venv's editable install names
               PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(RUNNER), str(NOTEBOOK), str(output), "--cwd", str(work)],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=540)


def tagged(nb, tag: str):
    cells = [cell for cell in nb.cells if tag in cell.metadata.get("tags", [])]
    assert len(cells) == 1, f"expected one cell tagged {tag!r}, found {len(cells)}"
    return cells[0]


class _HtmlTable(HTMLParser):
    """The cells of the first HTML table, row by row (the stdlib parser: no lxml needed)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def table_rows(cell) -> list[dict[str, str]]:
    """The rows of the DataFrame a cell shows (its text/html), as {column: text}."""
    pages = [output.data["text/html"] for output in cell.outputs if output.output_type == "execute_result"]
    assert pages, f"cell {cell.metadata.get('tags')} shows no table"
    parser = _HtmlTable()
    parser.feed(pages[0])
    header, *body = parser.rows
    return [dict(zip(header[1:], row[1:])) for row in body]  # the first column is the index


def test_every_cell_runs(executed):
    done, nb = executed
    assert done.returncode == 0, f"the notebook failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(cell.execution_count for cell in code_cells), "a code cell was not executed"
    errors = [output for cell in code_cells for output in cell.outputs if output.output_type == "error"]
    assert not errors, errors


def test_worst_topics_names_the_seeded_loss_first(executed):
    _, nb = executed
    rows = [(row["logical_topic"], row["tier"], row["missing"]) for row in table_rows(tagged(nb, "worst-topics"))]
    # The loss shows at its tier first and, measured against the producer, at every tier after it; nothing else.
    assert rows == [(f"dc1.{LOST_TOPIC}", LOST_TIER, str(LOST_COUNT)), (f"dc1.{LOST_TOPIC}", "lake", str(LOST_COUNT))]


def test_completeness_by_tier_counts_the_loss_where_it_happened(executed):
    _, nb = executed
    rows = table_rows(tagged(nb, "completeness-by-tier"))
    assert [(row["tier"], int(row["missing"])) for row in rows] == [
        ("producer", 0), ("dc1", 0), ("aggregate", LOST_COUNT), ("lake", LOST_COUNT)]
    assert [int(row["incomplete_windows"]) for row in rows] == [0, 0, 1, 1]
    assert [int(row["mismatch_windows"]) for row in rows] == [0, 0, 1, 1]


def test_mismatch_windows_name_the_tiers_and_partitions_whose_content_differs(executed):
    _, nb = executed
    rows = table_rows(tagged(nb, "mismatch-windows"))
    assert [(row["logical_topic"], row["tier"], row["partitions"]) for row in rows] == [
        ("dc1.orders", "aggregate", "1"), ("dc1.orders", "lake", "1")]
    assert rows[0]["expected"] == rows[0]["observed"], "the counts balance"


def test_lag_now_puts_the_lagging_tier_first(executed):
    _, nb = executed
    first, second = table_rows(tagged(nb, "lag-now"))[:2]
    assert (first["logical_topic"], first["tier"], first["lag"]) == ("dc1.clicks", "lake", "5200"), first
    assert 44 <= float(first["behind_minutes"]) < 50, first
    assert float(second["behind_minutes"]) < 5, second


@pytest.mark.parametrize("tag", ["loss-timeline", "lag-history"])
def test_chart_cells_draw_a_plotly_figure(executed, tag):
    _, nb = executed
    figures = [output.data["application/vnd.plotly.v1+json"] for output in tagged(nb, tag).outputs
               if "application/vnd.plotly.v1+json" in output.get("data", {})]
    assert len(figures) == 1 and figures[0]["data"], f"cell {tag!r} drew no figure"


def test_complete_windows_stop_before_the_first_open_problem_at_the_lake(executed):
    _, nb = executed
    marks = {(row["logical_topic"], row["tier"]): row for row in table_rows(tagged(nb, "complete-through"))}
    lost = marks[(f"dc1.{LOST_TOPIC}", "lake")]
    assert lost["first_open_status"] == "incomplete", lost  # window 3 lost 37 on the way into the aggregate
    assert marks[("dc1.orders", "lake")]["first_open_status"] == "over", "window 5 holds 9 duplicates at the lake"
    assert marks[("dc1.clicks", "lake")]["first_open_status"] == "lagging"
    assert marks[(f"dc1.{LOST_TOPIC}", "dc1")]["first_open_status"] in ("pending", "lagging"), "only in flight"

    bronze_rows = {row["topic"]: row for row in table_rows(tagged(nb, "complete-bronze"))}
    # payments: windows 0-2 before the lost window 3; orders: 0-4 before the duplicated window 5.
    assert (bronze_rows[f"dc1.{LOST_TOPIC}"]["windows"], bronze_rows["dc1.orders"]["windows"]) == ("3", "5")
    assert bronze_rows["dc1.orders"]["messages"] == str(5 * BRONZE_PER_WINDOW)
    for topic, row in bronze_rows.items():
        assert pd.Timestamp(row["last_window"]) < pd.Timestamp(marks[(topic, "lake")]["complete_through"])


def test_committed_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    dirty = [index for index, cell in enumerate(nb.cells) if cell.cell_type == "code"
             and (cell.outputs or cell.execution_count is not None)]
    assert not dirty, f"code cells {dirty} of {NOTEBOOK.name} hold outputs: clear them before committing"
