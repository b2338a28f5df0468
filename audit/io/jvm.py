"""Where the JVM parts live: Java itself and the jar folders that `make setup` fills from Maven Central."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from audit.contract.errors import SetupError

# Folders under <cache_dir>/jars, each filled by `make setup` from a pom under jvm/.
KAFKA_JARS = "kafka"
SPARK_JARS = "spark"
MIRRORMAKER_JARS = "mirrormaker"


# Where Debian's and Temurin's packages install JDKs.
JDK_FOLDER = Path("/usr/lib/jvm")
# The Java versions Spark 4.2 runs on (Kafka's brokers run on all three). Before 25.0.3 Spark calls Java 25
# deprecated: G1 could corrupt data (SPARK-55852).
SUPPORTED_JAVA = ((17,), (21,), (25, 0, 3))
# From Java 25 on, a JVM keeps the classes it loaded and linked, and the profiles of the methods it ran, in an
# ahead-of-time cache (JEPs 483, 514, 515), which starts a new Spark driver faster than Java 17's class-data
# archive can (docs/performance.md).
AOT_CACHE_JAVA = (25,)


def java_version(home: Path) -> tuple[int, ...]:
    """The version a JDK's `release` file gives (`JAVA_VERSION="25.0.3"` -> (25, 0, 3)); () when it has none."""
    try:
        text = (home / "release").read_text()
    except OSError:
        return ()
    for line in text.splitlines():
        if line.startswith("JAVA_VERSION="):
            return tuple(int(part) for part in line.split("=", 1)[1].strip('"').split(".") if part.isdigit())
    return ()


def supported(version: tuple[int, ...]) -> bool:
    """True for a Java version Spark and Kafka run on: 17 or 21, or 25 from 25.0.3 on."""
    return any(version[:1] == least[:1] and version >= least for least in SUPPORTED_JAVA)


def newest_installed_jdk(folder: Path = JDK_FOLDER) -> Path | None:
    """The JDK under `folder` of the newest supported version, None when there is none."""
    homes = [home for home in folder.glob("*") if home.is_dir() and not home.is_symlink()]
    versions = {home: java_version(home) for home in homes if (home / "bin" / "java").exists()}
    usable = sorted((version, str(home)) for home, version in versions.items() if supported(version))
    return Path(usable[-1][1]) if usable else None


def java_home() -> Path | None:
    """The JDK every JVM of the project starts from: $JAVA_HOME when set, else the newest supported JDK
    installed under /usr/lib/jvm (which may be newer than the `java` on PATH); None: the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return Path(home)
    return newest_installed_jdk()


def java_home_env() -> dict[str, str]:
    """The environment that gives JVMs other programs start (pyspark's, Spark's scripts) the same Java as ours."""
    home = java_home()
    return {} if home is None else {"JAVA_HOME": str(home)}


def java_executable() -> str:
    """The `java` binary of `java_home()`, else the one on PATH."""
    home = java_home()
    if home is not None:
        return str(home / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise SetupError("java not found: install OpenJDK 17 (or 21, or 25.0.3 and later) or set JAVA_HOME")
    return found


def keeps_aot_cache(java: str | None = None) -> bool:
    """True when `java` (default: ours) keeps an ahead-of-time cache rather than a class-data archive."""
    home = Path(os.path.realpath(java or java_executable())).parent.parent
    return java_version(home) >= AOT_CACHE_JAVA


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


# Class-data archives: the classes a broker or a Spark driver loads at start, parsed and verified once by `make
# setup` and mapped by every later start, which saves a broker or a small Spark job a good part of its start-up
# CPU; the test suite starts dozens of each. On Java 25 the
# archive is an ahead-of-time cache, which also holds the classes linked and the methods' profiles.
CLASS_ARCHIVES = "class-archives"
CDS_SUFFIX, AOT_SUFFIX = ".jsa", ".aot"  # Java 17's class-data archive, Java 25's ahead-of-time cache
ARCHIVE_SUFFIXES = (CDS_SUFFIX, AOT_SUFFIX)


def class_archive_jars(cache_dir: Path, name: str) -> list[Path]:
    """The jars a JVM of one set loads classes from: Spark's own besides ours for the Spark set."""
    if name == SPARK_JARS:
        return [*sorted(pyspark_jar_dir().glob("*.jar")), *jars(cache_dir, name)]
    return jars(cache_dir, name)


def class_archive_folders(jar_paths: list[Path]) -> list[str]:
    """The folders a jar set's jars are in (a venv's pyspark, the cache): where its archive belongs (`class_archive`)."""
    return sorted({str(jar.parent) for jar in jar_paths})


def class_archive(cache_dir: Path, name: str) -> Path:
    """Where the class-data archive of one jar set lives: `<set>-<where its jars are>-<what they are>.jsa`
    (`.aot` on Java 25). What they are is a digest of the Java and of every jar (path, size, time), all of
    which the JVM checks too: new jars or a new JDK look for an archive of their own, where the JVM would
    refuse the old one at every start. Where they are keeps one archive per venv, so two checkouts do not
    replace each other's."""
    java = os.path.realpath(java_executable())
    jar_paths = class_archive_jars(cache_dir, name)
    place = hashlib.sha256("\n".join(class_archive_folders(jar_paths)).encode())
    content = hashlib.sha256()
    for path in [Path(java), *jar_paths]:
        stat = path.stat()
        content.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    suffix = AOT_SUFFIX if keeps_aot_cache(java) else CDS_SUFFIX
    file_name = f"{name}-{place.hexdigest()[:8]}-{content.hexdigest()[:16]}{suffix}"
    return Path(cache_dir).expanduser() / CLASS_ARCHIVES / file_name


def class_archive_options(cache_dir: Path, name: str) -> list[str]:
    """JVM options that map the jar set's class-data archive, or none while `make setup` has not recorded
    it. Should the JVM still refuse it, it says so on stderr, never on stdout: a Spark driver's stdout is
    the command's."""
    archive = class_archive(cache_dir, name)
    if not archive.is_file():
        return []
    if archive.suffix == AOT_SUFFIX:
        return [f"-XX:AOTCache={archive}", *_class_data_log("warning", aot=True)]
    return [f"-XX:SharedArchiveFile={archive}", *_class_data_log("warning")]


def recording_options(archive: Path) -> list[str]:
    """JVM options that write the classes the JVM loaded to `archive` when it exits (on Java 25 also the
    methods' profiles, written by a second JVM the first starts as it exits). The classes it cannot archive
    (signed jars, generated ones: thousands of warnings) are not said; errors are, on stderr. Java 25 says
    none: Spark's module options make it report one that is harmless (no archived module graph), and a cache
    it failed to write is found missing by `audit.local.class_archives.record`."""
    if keeps_aot_cache():
        return [f"-XX:AOTCacheOutput={archive}", *_class_data_log("off", aot=True)]
    return [f"-XX:ArchiveClassesAtExit={archive}", *_class_data_log("error")]


def _class_data_log(level: str, *, aot: bool = False) -> list[str]:
    """The JVM's class-data messages from `level` up on stderr, none on stdout (where it writes them by default).
    Java 25 says most of them under `aot`, a tag Java 17 refuses."""
    options = []
    for tag in ("cds", "aot") if aot else ("cds",):
        options.append(f"-Xlog:{tag}*=off")
        if level != "off":
            options.append(f"-Xlog:{tag}*={level}:stderr")
    return options


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
