"""`kaudit spark-submit-args`: the spark-submit arguments of a Spark job for this project's pinned versions."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from audit.io.spark_submit import JOBS, shell_line, spark_submit_args
from audit.settings.environment import CONFIG_ENV
from audit.settings.storage import SPARK_MASTER_PATTERN

if TYPE_CHECKING:
    from audit.settings import Settings

DESCRIPTION = """\
Prints what follows `spark-submit` to run `kaudit reconcile` (or `kaudit lake`) on a Spark cluster with the
versions this project pins, so a hand-written command cannot drift from them. The output is ONE shell command
line, continued over several with `\\` (an option and its value per line, the driver and the job last), every
argument quoted for the shell:

  --master        --master URL, else [spark].master of the configuration (KAUDIT_SPARK_MASTER)
  --jars          the Delta, Kafka and S3A jars `make setup` cached, the ones a local run uses (offline);
                  with --packages instead: their Maven coordinates, read from jvm/spark/pom.xml, for a
                  cluster that fetches from Maven (plus --exclude-packages, as the pom excludes them)
  --conf          kafka-audit's Spark SQL settings (Delta's extension and catalog, UTC), the JVMs in UTC,
                  the lake's spark.hadoop.fs.s3a.* settings ([storage], AWS_* variables) and [spark].conf
  driver          the path of kafka-audit's `__main__.py`, then --config FILE (when one is in force:
                  --config or $KAUDIT_CONFIG), the job and the job's arguments (after `--`)

Secrets (settings whose name says secret, password or token, e.g. fs.s3a.secret.key) are printed as
references to environment variables, "spark.hadoop.fs.s3a.secret.key=$AWS_SECRET_ACCESS_KEY" in double
quotes: the shell that runs the line puts the value in, so it is never in the output. Leave the variable
unset and the value stays off the command line altogether: the driver sets the lake's settings again from its
own configuration and environment when its session starts. --show-secrets prints the values themselves.

Paths (jars, driver, config) are this host's: run spark-submit in client deploy mode from here, with the
package installed on every executor host too (its record checks run in Python workers).

examples:
  eval "spark-submit $(kaudit --config prod.toml spark-submit-args --master yarn)"
  kaudit spark-submit-args --master spark://host:7077 --packages --job lake -- --until-caught-up
"""


def add_command(commands) -> None:
    parser = commands.add_parser(
        "spark-submit-args",
        help="print the spark-submit arguments of `kaudit reconcile` or `kaudit lake` on a cluster, as a shell line",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--master", type=_master, metavar="URL", help="Spark master URL (default: [spark].master)")
    parser.add_argument("--job", choices=JOBS, default="reconcile", help="the kaudit job to run (default reconcile)")
    parser.add_argument(
        "--packages",
        action="store_true",
        help="Maven coordinates (--packages) instead of the cached jar files (--jars): spark-submit downloads them",
    )
    parser.add_argument(
        "--show-secrets", action="store_true", help="print secret values instead of $VARIABLE references"
    )
    parser.add_argument("job_args", nargs="*", metavar="-- JOB_ARG", help="arguments of the job, after `--`")
    parser.set_defaults(handler=run)


def _master(url: str) -> str:
    if not SPARK_MASTER_PATTERN.match(url):
        raise argparse.ArgumentTypeError(
            f"{url!r} is not a Spark master (local[2], spark://host:7077, yarn, k8s://...)"
        )
    return url


def run(args: argparse.Namespace, settings: Settings) -> int:
    line = spark_submit_args(
        settings,
        master=args.master,
        job=args.job,
        job_args=args.job_args,
        config_file=args.config or os.environ.get(CONFIG_ENV) or None,
        packages=args.packages,
        show_secrets=args.show_secrets,
    )
    print(shell_line(line))
    return 0
