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
