"""The `spark-submit` arguments of a kafka-audit job, built from what the project pins: the jars `make setup`
cached (or their Maven coordinates, read from jvm/spark/pom.xml), the Spark settings of `session_for`, the
lake's S3A settings and `[spark].conf`, the driver script and the job's own arguments.

    spark-submit $(...) == spark-submit <spark_submit_args(settings, master="yarn")>

`kaudit spark-submit-args` prints them; nothing here types a version again, so the command cannot drift from
the pins. Secrets are references to environment variables (`$AWS_SECRET_ACCESS_KEY`) unless asked for.
"""

from __future__ import annotations

import re
import shlex
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from audit.contract.errors import SetupError
from audit.io import jvm
from audit.io.lake import S3A, Lake, lake_of
from audit.io.spark import BASE_CONF

if TYPE_CHECKING:
    from audit.settings import Settings

JOBS = ("reconcile", "lake")
ROOT = Path(__file__).resolve().parents[2]
SPARK_POM = ROOT / "jvm" / "spark" / "pom.xml"
# `python audit/cli/__main__.py ...` is `kaudit ...`: the file spark-submit runs as the driver.
DRIVER_SCRIPT = Path(__file__).resolve().parents[1] / "cli" / "__main__.py"
MAVEN = "{http://maven.apache.org/POM/4.0.0}"

# spark_session leaves these to the submitter under spark-submit (its shuffle partitions are for small local data).
LOCAL_ONLY_CONF = frozenset({"spark.sql.shuffle.partitions"})
# A locally started driver runs in UTC (audit.io.spark.run_in_utc); on a cluster the JVMs must be told so.
UTC_JAVA_OPTIONS = "-Duser.timezone=UTC"
UTC_CONF = {
    "spark.driver.extraJavaOptions": UTC_JAVA_OPTIONS,
    "spark.executor.extraJavaOptions": UTC_JAVA_OPTIONS,
    "spark.executorEnv.TZ": "UTC",
}
# Settings whose value is a credential: printed as an environment variable reference unless shown.
SECRET_KEY = re.compile(r"secret|password|passwd|token|encryption\.key", re.IGNORECASE)
SECRET_VARIABLES = {f"{S3A}secret.key": "AWS_SECRET_ACCESS_KEY", f"{S3A}session.token": "AWS_SESSION_TOKEN"}


@dataclass(frozen=True)
class Artifact:
    """One Maven artifact: `group:artifact:version`, as `--packages` takes it."""

    group: str
    artifact: str
    version: str

    @property
    def coordinate(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def jar_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"


@dataclass(frozen=True)
class SparkPackages:
    """jvm/spark/pom.xml's direct dependencies (a version the pom leaves to an imported BOM taken from it) and the
    artifacts it excludes from their closure."""

    artifacts: tuple[Artifact, ...]
    exclusions: tuple[str, ...]  # group:artifact

    def version_of(self, artifact_prefix: str) -> str:
        """The version of the one artifact whose id starts with `artifact_prefix` (`delta-spark`)."""
        found = {a.version for a in self.artifacts if a.artifact.startswith(artifact_prefix)}
        if len(found) != 1:
            raise SetupError(f"{SPARK_POM}: {len(found)} versions of {artifact_prefix}*: {sorted(found)}")
        return found.pop()


def spark_packages(pom: Path = SPARK_POM) -> SparkPackages:
    """The Spark packages `make setup` copies, read from their pom."""
    try:
        project = ElementTree.parse(pom).getroot()
    except (OSError, ElementTree.ParseError) as exc:
        raise SetupError(f"cannot read the Spark packages' pom {pom} (a source checkout has it): {exc}") from None

    def text(element: ElementTree.Element, name: str) -> str:
        return (element.findtext(f"{MAVEN}{name}") or "").strip()

    boms = {
        text(bom, "groupId"): text(bom, "version")
        for bom in project.iterfind(f"{MAVEN}dependencyManagement/{MAVEN}dependencies/{MAVEN}dependency")
        if text(bom, "scope") == "import"
    }
    artifacts, exclusions = [], []
    for dependency in project.iterfind(f"{MAVEN}dependencies/{MAVEN}dependency"):
        group = text(dependency, "groupId")
        version = text(dependency, "version") or boms.get(group, "")
        if not version:
            raise SetupError(f"{pom}: {group}:{text(dependency, 'artifactId')} has no version and no BOM names one")
        artifacts.append(Artifact(group, text(dependency, "artifactId"), version))
        for excluded in dependency.iterfind(f"{MAVEN}exclusions/{MAVEN}exclusion"):
            exclusions.append(f"{text(excluded, 'groupId')}:{text(excluded, 'artifactId')}")
    return SparkPackages(tuple(artifacts), tuple(dict.fromkeys(exclusions)))


def cached_jars(cache_dir: Path, pom: Path = SPARK_POM) -> list[Path]:
    """The Spark jars `make setup` cached (the local session's `spark.jars`); an error when they are not the pom's
    (the pom changed since: `make setup` copies them again)."""
    found = jvm.jars(cache_dir, jvm.SPARK_JARS)
    if pom.is_file():
        names = {jar.name for jar in found}
        missing = [a.jar_name for a in spark_packages(pom).artifacts if a.jar_name not in names]
        if missing:
            raise SetupError(f"the cached Spark jars lack {', '.join(missing)} of {pom}: run `make setup`")
    return found


class EnvReference(str):
    """A `key=$VARIABLE` argument standing for a secret: a shell expands it when the command runs."""

    __slots__ = ()


def secret_variable(key: str) -> str:
    """The environment variable a masked setting refers to: AWS's names for S3A's credentials, else the key's."""
    return SECRET_VARIABLES.get(key) or re.sub(r"[^A-Za-z0-9]", "_", key).upper()


def submitted_conf(settings: Settings, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Spark settings a kafka-audit job's session runs with under spark-submit: `session_for`'s (kafka-audit's
    own, the lake's storage settings, `[spark].conf` winning), the JVMs in UTC."""
    lake = lake_of(settings) if env is None else Lake.from_settings(settings, env)
    conf = {key: value for key, value in BASE_CONF.items() if key not in LOCAL_ONLY_CONF}
    conf.update(UTC_CONF)
    conf.update(lake.spark_conf())
    for key, value in settings.spark.conf.items():
        if key in UTC_CONF and key.endswith("JavaOptions") and "-Duser.timezone" not in value:
            value = f"{UTC_JAVA_OPTIONS} {value}"
        conf[key] = value
    return conf


def spark_submit_args(
    settings: Settings,
    *,
    master: str | None = None,
    job: str = "reconcile",
    job_args: Sequence[str] = (),
    config_file: Path | str | None = None,
    packages: bool = False,
    show_secrets: bool = False,
    extra_conf: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> list[str]:
    """Everything after `spark-submit` that runs `kaudit [--config FILE] <job> <job_args>` on `master` (default
    `[spark].master`): `--jars` with the cached jars (offline), or with `packages` `--packages` and
    `--exclude-packages` from the pom (fetched from Maven by spark-submit); a `--conf` per setting of
    `submitted_conf` and `extra_conf`. A secret's value is an EnvReference (`key=$AWS_SECRET_ACCESS_KEY`) unless
    `show_secrets`: the driver sets it again from its own settings as its session starts (`session_for`)."""
    if job not in JOBS:
        raise ValueError(f"job {job!r} is not one of {', '.join(JOBS)}")
    args = ["--master", master or settings.spark.master]
    if packages:
        pinned = spark_packages()
        args += ["--packages", ",".join(a.coordinate for a in pinned.artifacts)]
        args += ["--exclude-packages", ",".join(pinned.exclusions)] if pinned.exclusions else []
    else:
        args += ["--jars", ",".join(str(jar) for jar in cached_jars(settings.cache_dir))]
    for key, value in {**submitted_conf(settings, env), **(extra_conf or {})}.items():
        if SECRET_KEY.search(key) and not show_secrets:
            args += ["--conf", EnvReference(f"{key}=${secret_variable(key)}")]
        else:
            args += ["--conf", f"{key}={value}"]
    args.append(str(DRIVER_SCRIPT))
    if config_file is not None:
        args += ["--config", str(Path(config_file).expanduser().absolute())]
    return [*args, job, *job_args]


def shell_line(args: Sequence[str]) -> str:
    """`args` as one shell command line continued over several (`\\` at each end): an option and its value per
    line, then the driver with the job's arguments. Each argument is quoted as a single word; an EnvReference is in
    double quotes, so that the shell puts the variable's value in when the command runs (never in the text)."""
    words = [f'"{arg}"' if isinstance(arg, EnvReference) else shlex.quote(arg) for arg in args]
    driver = list(args).index(str(DRIVER_SCRIPT))
    lines = [" ".join(words[index : index + 2]) for index in range(0, driver, 2)]
    return " \\\n  ".join([*lines, " ".join(words[driver:])])
