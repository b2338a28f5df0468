"""Before the books' first run (issue 70): the UI waits on a lake with no tables yet and serves the pages once they
exist, without a restart; a lake it cannot reach, or a path holding something else, is an error at start."""

from __future__ import annotations

import dash
import pytest

from audit.cli.main import main
from audit.contract.errors import LakeError
from audit.io import delta_io
from audit.io.lake import Lake
from audit.settings import Settings
from dashboards.first_run import BooksWatch, books_have_run
from dashboards.sample import demo_frames, write_frames
from dashboards.screenshots import recent_now

OVERVIEW = "dashboards.pages.overview"


def test_a_lake_not_written_yet_is_waited_on(tmp_path):
    assert books_have_run(Lake.of(tmp_path / "lake")) is False  # not there yet
    (tmp_path / "lake" / "_checkpoints").mkdir(parents=True)  # what the lake job writes before the books run
    delta_io.ensure_tables(str(tmp_path / "lake"), ("bronze",))
    assert books_have_run(Lake.of(tmp_path / "lake")) is False
    delta_io.ensure_tables(str(tmp_path / "lake"), ("completeness",))
    assert books_have_run(Lake.of(tmp_path / "lake")) is True


def a_file(tmp_path):
    (tmp_path / "lake").write_text("not a lake")
    return tmp_path / "lake"


def one_delta_table(tmp_path):
    (tmp_path / "lake" / "_delta_log").mkdir(parents=True)
    return tmp_path / "lake"


def a_folder_of_photos(tmp_path):
    (tmp_path / "lake").mkdir()
    (tmp_path / "lake" / "holiday.jpg").write_text("")
    return tmp_path / "lake"


def under_a_file(tmp_path):
    (tmp_path / "afile").write_text("")
    return tmp_path / "afile" / "lake"


@pytest.mark.parametrize(
    "path, named",
    [
        (a_file, "is a file, not a kafka-audit lake"),
        (one_delta_table, "is one Delta table, not a kafka-audit lake"),
        (a_folder_of_photos, "holds holiday.jpg, not kafka-audit tables"),
        (under_a_file, "cannot reach the lake"),
    ],
)
def test_a_path_that_holds_something_else_or_cannot_be_reached_is_an_error(tmp_path, path, named):
    with pytest.raises(LakeError, match=named):
        books_have_run(Lake.of(path(tmp_path)))


def test_kaudit_ui_exits_2_naming_a_path_that_is_not_a_lake(tmp_path, capsys, monkeypatch):
    (tmp_path / "typo").write_text("")
    monkeypatch.setenv("KAUDIT_LAKE_PATH", str(tmp_path / "typo"))
    monkeypatch.setenv("KAUDIT_STATE_DIR", str(tmp_path))
    assert main(["ui"]) == 2
    err = capsys.readouterr().err
    assert "not a kafka-audit lake" in err and str(tmp_path / "typo") in err


class CountingLake:
    def __init__(self) -> None:
        self.looks, self.books = 0, False

    def has_books(self) -> bool:
        self.looks += 1
        return self.books


def test_the_watch_looks_at_most_every_interval_and_never_again_once_ready():
    lake, clock = CountingLake(), [0.0]
    watch = BooksWatch(lake, every_s=2.0, clock=lambda: clock[0])
    assert [watch.ready() for _ in range(50)] == [False] * 50 and lake.looks == 1
    lake.books, clock[0] = True, 1.9
    assert not watch.ready() and lake.looks == 1
    clock[0] = 2.0
    assert watch.ready() and lake.looks == 2
    assert all(watch.ready() for _ in range(50)) and lake.looks == 2


def test_every_page_waits_naming_the_lake_then_serves_itself_without_a_restart(tmp_path):
    from dashboards.app import create_app
    from dashboards.context import context
    from dashboards.waiting import _show_the_page_once_the_books_ran as poll

    lake = tmp_path / "lake"
    create_app(Settings.default().replace(state_dir=tmp_path), lake=str(lake))
    for module in ("overview", "topic", "lag", "alerts"):
        waiting = str(dash.page_registry[f"dashboards.pages.{module}"]["layout"]())
        assert f"waiting for the books' first run at {lake}" in waiting, (module, waiting)
    assert poll(1, "/topic", "?topic=dc1.orders") is dash.no_update

    write_frames(str(lake), demo_frames(recent_now()))
    context().books.every_s = 0.0  # the next look sees the tables
    page = str(poll(2, "/topic", "?topic=dc1.orders&range=6h"))
    assert "Topic dc1.orders" in page and "waiting for" not in page
    assert "Completeness overview" in str(dash.page_registry[OVERVIEW]["layout"]())
