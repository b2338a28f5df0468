"""java_client_options: librdkafka settings of a cluster as Java Kafka client properties (Spark's Kafka source)."""

from __future__ import annotations

import pytest

from audit.contract.errors import ConfigError
from audit.io.clients import SPARK_FETCH_MAX_WAIT_MS, java_client_options, spark_kafka_options
from audit.settings import from_dict


def options(client: dict, name: str = "east") -> dict:
    settings = from_dict(
        {"clusters": [{"name": "dc1"}, {"name": name, "bootstrap_servers": "b1:9093,b2:9093", "client": client}]}
    )
    return java_client_options(settings, name)


SCRAM = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="audit" password="s3cr\\"t";'


@pytest.mark.parametrize(
    ("client", "expected"),
    [
        ({}, {"bootstrap.servers": "b1:9093,b2:9093", "security.protocol": "PLAINTEXT"}),
        (
            {
                "security.protocol": "sasl_ssl",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "audit",
                "sasl.password": 's3cr"t',
                "ssl.ca.location": "/etc/ca.pem",
            },
            {
                "bootstrap.servers": "b1:9093,b2:9093",
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.jaas.config": SCRAM,
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": "/etc/ca.pem",
            },
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "PLAIN",
                "sasl.username": "u",
                "sasl.password": "p",
            },
            {
                "bootstrap.servers": "b1:9093,b2:9093",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";',
            },
        ),
        (
            {
                "security.protocol": "SSL",
                "ssl.ca.location": "/ca.pem",
                "ssl.certificate.location": "/me.pem",
                "ssl.key.location": "/me.pem",
                "ssl.key.password": "k",
                "client.id": "spark",
                "ssl.endpoint.identification.algorithm": "none",
            },
            {
                "bootstrap.servers": "b1:9093,b2:9093",
                "security.protocol": "SSL",
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": "/ca.pem",
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": "/me.pem",
                "ssl.key.password": "k",
                "client.id": "spark",
                "ssl.endpoint.identification.algorithm": "",
            },
        ),
        (
            {"security.protocol": "SSL", "ssl.ca.pem": "CA", "ssl.certificate.pem": "CERT", "ssl.key.pem": "KEY"},
            {
                "bootstrap.servers": "b1:9093,b2:9093",
                "security.protocol": "SSL",
                "ssl.truststore.type": "PEM",
                "ssl.truststore.certificates": "CA",
                "ssl.keystore.type": "PEM",
                "ssl.keystore.certificate.chain": "CERT",
                "ssl.keystore.key": "KEY",
            },
        ),
    ],
)
def test_librdkafka_settings_map_to_java_properties(client, expected):
    assert options(client) == expected


def test_separate_certificate_and_key_files_become_an_inline_pem_keystore(tmp_path):
    (tmp_path / "cert.pem").write_text("CERT")
    (tmp_path / "key.pem").write_text("KEY")
    result = options(
        {
            "security.protocol": "SSL",
            "ssl.certificate.location": str(tmp_path / "cert.pem"),
            "ssl.key.location": str(tmp_path / "key.pem"),
        }
    )
    assert (result["ssl.keystore.type"], result["ssl.keystore.certificate.chain"], result["ssl.keystore.key"]) == (
        "PEM",
        "CERT",
        "KEY",
    )


@pytest.mark.parametrize(
    ("client", "message"),
    [
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "clusters[1].client.sasl.mechanism:"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "clusters[1].client.sasl.mechanism:"),
        (
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u"},
            "clusters[1].client.sasl.password: missing",
        ),
        ({"security.protocol": "QUIC"}, "clusters[1].client.security.protocol:"),
        ({"linger.ms": "5"}, "clusters[1].client.linger.ms: no Java Kafka client equivalent"),
        (
            {"security.protocol": "SSL", "ssl.certificate.location": "/c.pem"},
            "clusters[1].client.ssl.key.location: missing",
        ),
        (
            {"security.protocol": "SSL", "ssl.certificate.location": "/nope/c.pem", "ssl.key.location": "/nope/k.pem"},
            "clusters[1].client.ssl.certificate.location:",
        ),
        (
            {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "dns"},
            "clusters[1].client.ssl.endpoint.identification.algorithm:",
        ),
    ],
)
def test_settings_it_cannot_map_are_config_errors_naming_the_key(client, message):
    with pytest.raises(ConfigError, match=None) as caught:
        options(
            {"sasl.password": "hunter2", **client}
            if "sasl.password" not in client and "PLAIN" not in str(client)
            else client
        )
    assert message in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_spark_kafka_options_are_the_java_options_prefixed_with_a_short_fetch_wait():
    settings = from_dict({"clusters": [{"name": "dc1", "bootstrap_servers": "b1:9092", "client": {"client.id": "x"}}]})

    assert spark_kafka_options(settings, "dc1") == {
        "kafka.bootstrap.servers": "b1:9092",
        "kafka.security.protocol": "PLAINTEXT",
        "kafka.client.id": "x",
        "kafka.fetch.max.wait.ms": str(SPARK_FETCH_MAX_WAIT_MS),
    }
