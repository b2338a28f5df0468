"""A Spark standalone cluster on loopback: one master and N workers started with pyspark's own
`bin/spark-class`, for running the Spark jobs through `spark-submit` as on a real cluster.

    with SparkStandalone(work_dir, workers=2) as cluster:
        subprocess.run(cluster.job_command(settings, config_file=path), env=cluster.env())  # kaudit reconcile

The daemons run in the foreground of their own processes (logs under `work_dir`), so stopping is a
SIGTERM to each, and nothing outlives the `with` block.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from audit.io import jvm
from audit.io.spark_submit import EnvReference, spark_submit_args
from audit.local.processes import free_port, terminate

if TYPE_CHECKING:
    from audit.settings import Settings

log = logging.getLogger(__name__)

HOST = "127.0.0.1"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class SparkStandalone:
    """A master and `workers` workers of `cores` cores and `memory` each, on loopback."""

    def __init__(self, work_dir: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.work_dir, self.workers, self.cores, self.memory = Path(work_dir), workers, cores, memory
        self.port, self.ui_port = free_port(HOST), free_port(HOST)
        self.processes: list[subprocess.Popen] = []

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    def __enter__(self) -> SparkStandalone:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_exc) -> None:
        self.stop()

    def start(self, timeout_s: float = 120.0) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._daemon("master", "org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(self.port),
                     "--webui-port", str(self.ui_port))  # fmt: skip
        for index in range(self.workers):
            work = self.work_dir / f"worker-{index}"
            self._daemon(f"worker-{index}", "org.apache.spark.deploy.worker.Worker", self.master_url,
                         "--host", HOST, "--cores", str(self.cores), "--memory", self.memory,
                         "--webui-port", str(free_port(HOST)), "--work-dir", str(work))  # fmt: skip
        self._wait_for_workers(timeout_s)

    @staticmethod
    def env() -> dict[str, str]:
        """The environment of the daemons and of `spark-submit`: pyspark's Spark on the project's Java, on loopback."""
        return {**os.environ, **jvm.java_home_env(), "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": HOST}

    def _daemon(self, name: str, main_class: str, *args: str) -> None:
        out = open(self.work_dir / f"{name}.log", "w")  # noqa: SIM115 - kept open for the process's life
        env = {**self.env(), "SPARK_NO_DAEMONIZE": "1"}
        command = [str(spark_home() / "bin" / "spark-class"), main_class, *args]
        self.processes.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env))
        log.info("spark daemon started", extra={"daemon": name, "pid": self.processes[-1].pid})

    def state(self) -> dict:
        """The master's state as its web UI's JSON gives it (`aliveworkers`, `activeapps`, `completedapps`, ...)."""
        with urllib.request.urlopen(f"http://{HOST}:{self.ui_port}/json/", timeout=2) as answer:
            return json.load(answer)

    def alive_workers(self) -> int:
        """Workers the master counts as alive, 0 while it does not answer (or answers with a page, not its JSON,
        as its web UI may while it starts)."""
        try:
            return int(self.state().get("aliveworkers", 0))
        except (OSError, ValueError):
            return 0

    def _wait_for_workers(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.alive_workers() < self.workers:
            exited = [p.args[1] for p in self.processes if p.poll() is not None]
            if exited or time.monotonic() > deadline:
                logs = "\n".join(path.read_text()[-1500:] for path in sorted(self.work_dir.glob("*.log")))
                raise RuntimeError(
                    f"spark standalone: {self.alive_workers()} of {self.workers} workers registered "
                    f"({'exited: ' + ', '.join(exited) if exited else f'after {timeout_s:.0f} s'})\n{logs}"
                )
            time.sleep(0.5)
        log.info("spark standalone cluster up", extra={"master": self.master_url, "workers": self.workers})

    def submit_conf(self) -> dict[str, str]:
        """What a job sent here needs besides its own settings: executors on this Python, sized to the workers."""
        return {
            "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
            "spark.executor.memory": self.memory,
            "spark.driver.host": HOST,
        }

    def submit_command(self, cache_dir: Path) -> list[str]:
        """`spark-submit` to this master with the cached Delta and Kafka jars (offline), executors on this
        Python; append the application (a .py file) and its arguments."""
        jars = ",".join(str(jar) for jar in jvm.jars(cache_dir, jvm.SPARK_JARS))
        conf = [arg for key, value in self.submit_conf().items() for arg in ("--conf", f"{key}={value}")]
        return [str(spark_home() / "bin" / "spark-submit"), "--master", self.master_url, "--jars", jars, *conf]

    def job_command(
        self,
        settings: Settings,
        *,
        job: str = "reconcile",
        config_file: Path | None = None,
        job_args: Sequence[str] = (),
    ) -> list[str]:
        """`spark-submit` of `kaudit [--config config_file] <job> <job_args>` to this master, with the arguments
        `kaudit spark-submit-args` prints (`spark_submit_args`) and `submit_conf`. Run without a shell, the secrets'
        $VARIABLE references are left out: the driver's session sets them from its own settings and environment."""
        args = spark_submit_args(
            settings,
            master=self.master_url,
            job=job,
            job_args=job_args,
            config_file=config_file,
            extra_conf=self.submit_conf(),
        )
        masked = {index for index, arg in enumerate(args) if isinstance(arg, EnvReference)}
        kept = [arg for index, arg in enumerate(args) if index not in masked and index + 1 not in masked]
        return [str(spark_home() / "bin" / "spark-submit"), *kept]

    def stop(self, timeout_s: float = 15.0) -> None:
        terminate({p.pid for p in self.processes if p.poll() is None}, timeout_s)
        for process in self.processes:
            process.wait(5)
        self.processes.clear()
