"""Where `make setup` puts the Java producer interceptor (jvm/interceptor): a jar any Java Kafka producer loads
with `interceptor.classes=io.kaudit.KafkaAuditInterceptor` to write the producer tier's counts, and Kafka's
kafka-tools jar beside it (ProducerPerformance, run on the broker jars, for the interceptor's test and bench)."""

from __future__ import annotations

from pathlib import Path

from audit.contract.errors import SetupError

INTERCEPTOR_JARS = "interceptor"  # the folder under <cache_dir>/jars
INTERCEPTOR_CLASS = "io.kaudit.KafkaAuditInterceptor"
JAR_NAME = "kafka-audit-interceptor.jar"
TOOLS = "tools"


def interceptor_jar(cache_dir: Path) -> Path:
    """The interceptor's jar; an error that says to run `make setup` when it is not built."""
    jar = Path(cache_dir).expanduser() / "jars" / INTERCEPTOR_JARS / JAR_NAME
    if not jar.is_file():
        raise SetupError(f"no {jar}: run `make setup` (or `make interceptor`) to build the Java producer interceptor")
    return jar


def tools_jars(cache_dir: Path) -> list[Path]:
    """Kafka's kafka-tools jar(s), which `make setup` copies beside the interceptor."""
    folder = Path(cache_dir).expanduser() / "jars" / INTERCEPTOR_JARS / TOOLS
    found = sorted(folder.glob("*.jar"))
    if not found:
        raise SetupError(f"no jars in {folder}: run `make setup` (or `make interceptor`) to fetch kafka-tools")
    return found
