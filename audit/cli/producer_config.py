"""`kaudit producer-config --cluster NAME`: the settings that audit any producer of a configured cluster."""

from __future__ import annotations

import argparse

from audit.settings import Settings

FORMATS = ("properties", "kcat", "java")


def add_command(commands) -> None:
    parser = commands.add_parser(
        "producer-config",
        help="print the settings that audit any producer of a cluster (librdkafka plugin, Java interceptor)",
        description="Prints the client settings that make a producer of CLUSTER count what the brokers "
        "acknowledged and write the producer tier's count records into the audit topic, with this "
        "configuration's audit topic, window and flush interval. librdkafka clients (kcat, confluent-kafka, "
        "Go, .NET, Node) load the plugin `make setup` builds: plugin.library.paths must come first. Java "
        "producers (Kafka Streams, Connect, MirrorMaker 2) put the interceptor jar on their classpath.",
    )
    parser.add_argument("--cluster", required=True, help="cluster name from the configuration")
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="properties",
        help="properties: librdkafka's, then Java's, as key=value lines (default); kcat: -X arguments on one "
        "line; java: the Java interceptor's lines only",
    )
    parser.add_argument("--service", default="app", help="the service name the count records carry (default app)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from audit.io.interceptor_jar import INTERCEPTOR_CLASS, interceptor_jar
    from audit.io.plugin import digest_exclude_regex, plugin_config

    cluster = settings.cluster(args.cluster).name
    keys = {
        "kaudit.cluster": cluster,
        "kaudit.audit.topic": settings.audit_topic,
        "kaudit.window.minutes": str(settings.window_minutes),
        "kaudit.flush.interval.ms": str(round(settings.flush_interval_s * 1000)),
        "kaudit.service": args.service,
    }
    digest_exclude = digest_exclude_regex(settings.topics.digest_exclude)
    keys |= {"kaudit.digest.exclude": digest_exclude} if digest_exclude else {}
    if args.format == "kcat":
        librdkafka = {"plugin.library.paths": plugin_config()["plugin.library.paths"], **keys}
        print(" ".join(f"-X {key}={value}" for key, value in librdkafka.items()))
        return 0
    lines = []
    if args.format == "properties":
        lines += [
            "# librdkafka clients: plugin.library.paths first",
            f"plugin.library.paths={plugin_config()['plugin.library.paths']}",
        ]
        lines += [f"{key}={value}" for key, value in keys.items()]
    lines += [f"# Java producers: {interceptor_jar(settings.cache_dir)} on the classpath"]
    lines += [f"interceptor.classes={INTERCEPTOR_CLASS}", *(f"{key}={value}" for key, value in keys.items())]
    print("\n".join(lines))
    return 0
