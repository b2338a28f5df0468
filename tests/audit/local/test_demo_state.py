"""`kaudit demo` starts from a clean slate: an earlier demo's clusters, lake and mailbox go, nothing else."""

from __future__ import annotations

from audit.local.demo import start_fresh
from audit.settings import Settings


def leave(path, name="x"):
    path.mkdir(parents=True, exist_ok=True)
    (path / name).write_text("left by an earlier demo")


def test_an_earlier_demos_clusters_lake_and_mail_are_removed_and_the_rest_kept(tmp_path):
    state = tmp_path / ".kaudit"
    for part in ("clusters/dc1", "lake/completeness", "mail", "logs", "cache"):
        leave(state / part)

    removed = start_fresh(Settings(state_dir=state))

    assert sorted(p.name for p in removed) == ["clusters", "lake", "mail"]
    assert sorted(p.name for p in state.iterdir()) == ["cache", "logs"]
    assert start_fresh(Settings(state_dir=state)) == [], "nothing left to remove"


def test_a_lake_outside_the_state_directory_is_never_touched(tmp_path):
    state, lake = tmp_path / ".kaudit", tmp_path / "shared-lake"
    leave(state / "clusters")
    leave(lake / "completeness")

    removed = start_fresh(Settings(state_dir=state, lake_path=str(lake)))

    assert [p.name for p in removed] == ["clusters"]
    assert (lake / "completeness" / "x").exists()


def test_the_summary_names_the_ui_address_only_while_the_ui_runs(tmp_path):
    """issue 70: the demo printed `UI: http://127.0.0.1:8050` after its UI had exited."""
    import subprocess
    import sys

    from audit.local.demo import ui_state
    from audit.local.pipeline import PipelinePlan
    from audit.local.services import Service, Supervisor
    from audit.settings import UiSettings

    settings = Settings(state_dir=tmp_path, ui=UiSettings(port=18050))
    plan = PipelinePlan(regional=("dc1",), hub="aggregate")
    exited = subprocess.Popen([sys.executable, "-c", "raise SystemExit(2)"])
    exited.wait()
    supervisor = Supervisor(tmp_path)
    supervisor.services["ui"] = Service("ui", [], tmp_path / "ui.log", exited)
    assert ui_state(settings, plan, supervisor) == f"NOT RUNNING: it exited, see {tmp_path / 'ui.log'}"
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        supervisor.services["ui"] = Service("ui", [], tmp_path / "ui.log", running)
        assert ui_state(settings, plan, supervisor) == "http://127.0.0.1:18050"
    finally:
        running.kill()
        running.wait()
    assert ui_state(settings, PipelinePlan(regional=("dc1",), hub="aggregate", with_ui=False), supervisor).startswith(
        "not started"
    )
