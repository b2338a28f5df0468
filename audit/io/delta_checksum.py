"""Version 0's checksum file (Delta's protocol: "Version Checksum File") for a table `deltalake` created empty.

`deltalake` writes no checksum file. Without one, Spark computes the state of version 0 from the log, with
jobs of its own, at its first read and its first write of each table: a cost paid in every run on a new
lake. Spark's later commits extend the checksum incrementally, so only version 0's is written here.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

CREATION = {"commitInfo", "protocol", "metaData"}  # the actions of a commit that creates an empty table


def log_name(version: int) -> str:
    """A version's file name in `_delta_log`, without its suffix: 20 digits."""
    return f"{version:020d}"


def write_first_checksum(path: str) -> bool:
    """Write version 0's checksum file when version 0 created the table empty; True when written.

    Its content follows from the commit alone: no file, no byte, and the commit's own protocol and metadata.
    Only for a local table: a URI's is left as it was made."""
    if "://" in path and not path.startswith("file://"):
        return False
    # By hand: deltalake 1.6.6 writes no .crc (DeltaTable.create's PostCommitHookProperties: checkpoint, log
    # cleanup only), delta-spark only with its commits; DeltaTable.metadata()/protocol() reshape the actions.
    log_dir = Path(path.removeprefix("file://")) / "_delta_log"
    checksum, commit = log_dir / f"{log_name(0)}.crc", log_dir / f"{log_name(0)}.json"
    if checksum.exists() or not commit.exists() or (log_dir / f"{log_name(1)}.json").exists():
        return False  # there already, cleaned up with the old log, or of no use: Spark reads a later version
    lines = commit.read_text().splitlines()
    actions = [next(iter(json.loads(line).items())) for line in lines if line.strip()]
    kinds = [kind for kind, _ in actions]
    if sorted(kinds) != sorted(CREATION):  # files added, or more than a creation: Spark computes it
        return False
    found = dict(actions)
    content = {
        "tableSizeBytes": 0,
        "numFiles": 0,
        "numMetadata": 1,
        "numProtocol": 1,
        "setTransactions": [],
        "domainMetadata": [],
        "metadata": found["metaData"],
        "protocol": found["protocol"],
        "allFiles": [],
    }
    written = log_dir / f".{checksum.name}.{uuid.uuid4().hex}.tmp"  # a dot file: no reader of the log lists it
    written.write_text(json.dumps(content))
    os.replace(written, checksum)  # whole or not at all; two writers write the same content
    return True
