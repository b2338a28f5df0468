"""Before the books' first run: whether a lake is one the UI may wait on, and the cheap look that ends the wait.

A lake with no kafka-audit tables yet is normal for a while (every service started at once, a fresh demo): the
UI waits on it. A lake it cannot reach, or a path that holds something else (a file, a Delta table, a folder of
other files), is a mistake the UI names at start instead (`kaudit ui` exits 2)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from deltalake.exceptions import DeltaError

from audit.contract.errors import LakeError
from audit.contract.tables import EVERY_TABLE
from audit.io.lake import Lake

log = logging.getLogger(__name__)

# How often a waiting UI looks for the books' tables, whatever the number of browsers asking.
LOOK_EVERY_S = 2.0


def books_have_run(lake: Lake) -> bool:
    """Whether the books have written to `lake`; a LakeError when it cannot be reached or is not a kafka-audit
    lake (the UI must not wait forever on a mistyped path that can never become one)."""
    if not lake.on_object_store:
        _check_local_root(Path(lake.root))
    try:
        return lake.has_books()
    except (OSError, DeltaError) as error:
        raise LakeError(f"cannot reach the lake {lake}: {error}") from error


def _check_local_root(root: Path) -> None:
    if not root.exists():
        existing = next(parent for parent in root.parents if parent.exists())
        if not existing.is_dir() or not os.access(existing, os.R_OK | os.X_OK):
            raise LakeError(f"cannot reach the lake {root}: {existing} is not a folder this user can read")
        return
    if not root.is_dir():
        raise LakeError(f"{root} is a file, not a kafka-audit lake: is lake_path right?")
    if (root / "_delta_log").exists():
        raise LakeError(f"{root} is one Delta table, not a kafka-audit lake (a folder of them): is lake_path right?")
    try:
        foreign = sorted(entry.name for entry in root.iterdir() if not _ours(entry.name))
    except OSError as error:
        raise LakeError(f"cannot reach the lake {root}: {error}") from error
    if foreign:
        raise LakeError(
            f"{root} holds {', '.join(foreign[:3])}{' ...' if len(foreign) > 3 else ''}, not kafka-audit tables: "
            "is lake_path right? (kaudit config show prints the lake in force)"
        )


def _ours(name: str) -> bool:
    """A table kafka-audit writes, or its bookkeeping (`_kaudit`, `_checkpoints`), or a hidden file."""
    return name in EVERY_TABLE or name.startswith(("_", "."))


class BooksWatch:
    """`ready()`: whether the books have run on `lake`. Looks at most every `every_s` until they have, then never
    again (tables are not unwritten); a failed look is a "not yet", logged."""

    def __init__(self, lake: Lake, *, every_s: float = LOOK_EVERY_S, clock: Callable[[], float] = time.monotonic):
        self.lake, self.every_s, self.clock = lake, every_s, clock
        self._ready = False
        self._looked_at: float | None = None
        self._lock = threading.Lock()

    def ready(self) -> bool:
        if self._ready:
            return True
        with self._lock:
            now = self.clock()
            if self._looked_at is not None and now - self._looked_at < self.every_s:
                return False
            self._looked_at = now
        try:
            self._ready = self.lake.has_books()
        except (OSError, DeltaError, LakeError) as error:
            log.warning("cannot look at the lake", extra={"lake": str(self.lake), "error": str(error)})
        if self._ready:
            log.info("the books have run: serving the audit pages", extra={"lake": str(self.lake)})
        return self._ready
