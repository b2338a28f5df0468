"""Where the JVM parts live: Java itself and the jar folders that `make setup` fills from Maven Central."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from audit.contract.errors import SetupError

# Folders under <cache_dir>/jars, each filled by `make setup` from a pom under jvm/.
KAFKA_JARS = "kafka"
SPARK_JARS = "spark"
MIRRORMAKER_JARS = "mirrormaker"


def java_executable() -> str:
    """The `java` binary: $JAVA_HOME/bin/java when set, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise SetupError("java not found: install OpenJDK 17 or set JAVA_HOME")
    return found


def jar_dir(cache_dir: Path, name: str) -> Path:
    """The folder of one jar set; an error that says to run `make setup` when it is empty."""
    folder = Path(cache_dir).expanduser() / "jars" / name
    if not folder.is_dir() or not any(folder.glob("*.jar")):
        raise SetupError(f"no jars in {folder}: run `make setup` to fetch them from Maven Central")
    return folder


def jars(cache_dir: Path, name: str) -> list[Path]:
    """Every jar of one set, sorted so class paths are stable."""
    return sorted(jar_dir(cache_dir, name).glob("*.jar"))


def classpath(cache_dir: Path, name: str) -> str:
    """A `-cp` value for one jar set."""
    return os.pathsep.join(str(jar) for jar in jars(cache_dir, name))


def artifact_name(jar: Path) -> str:
    """`jackson-core-2.13.5.jar` -> `jackson-core`: the artifact without its version."""
    parts = jar.stem.split("-")
    for index, part in enumerate(parts):
        if index and part[:1].isdigit():
            return "-".join(parts[:index])
    return jar.stem


def pyspark_jar_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def prune_provided(folder: Path, provided: Path | None = None) -> list[Path]:
    """Delete jars of `folder` whose artifact Spark already ships, as `--packages` would not add them.

    Maven copies a package's whole runtime closure, older Jackson or Parquet included; on Spark's
    class path those would shadow the versions Spark was built with.
    """
    shipped = {artifact_name(jar) for jar in (provided or pyspark_jar_dir()).glob("*.jar")}
    removed = [jar for jar in Path(folder).glob("*.jar") if artifact_name(jar) in shipped]
    for jar in removed:
        jar.unlink()
    return removed


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m audit.io.jvm", description="Jar-cache maintenance used by `make setup`."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    prune = sub.add_parser("prune-provided", help="remove jars that pyspark already ships from a Spark package folder")
    prune.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    removed = prune_provided(args.folder)
    kept = sorted(jar.name for jar in args.folder.glob("*.jar"))
    print(f"removed {len(removed)} jars Spark ships; kept {len(kept)}: {' '.join(kept)}")


if __name__ == "__main__":
    main()
