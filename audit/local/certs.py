"""Security of a local cluster: its SCRAM users (`ClusterSecurity`) and test certificates for its TLS
listener, a CA and a broker certificate it signs.

The broker certificate names 127.0.0.1 and localhost (subject alternative names), so clients that
verify host names (librdkafka and Java both do by default) accept it on loopback. Keys are written
unencrypted, readable by the owner only: these are throw-away credentials of a local test cluster.
Kafka reads the PEM files directly (ssl.keystore.type=PEM, ssl.truststore.type=PEM).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from audit.contract.errors import ClusterError

DEFAULT_VALID_DAYS = 365
KEY_BITS = 2048


@dataclass(frozen=True)
class TlsFiles:
    """Where one cluster's certificates live."""

    folder: Path

    @property
    def ca(self) -> Path:
        """The CA certificate: clients trust it (ssl.ca.location, a PEM truststore)."""
        return self.folder / "ca.pem"

    @property
    def keystore(self) -> Path:
        """The broker's private key followed by its certificate chain: a Kafka PEM keystore."""
        return self.folder / "broker-keystore.pem"

    def exist(self) -> bool:
        return self.ca.exists() and self.keystore.exists()


def ensure_tls_files(
    folder: Path, *, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"), valid_days: int = DEFAULT_VALID_DAYS
) -> TlsFiles:
    """The certificates in `folder`, generated on the first call and kept afterwards."""
    files = TlsFiles(Path(folder))
    if files.exist():
        return files
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    now = datetime.datetime.now(datetime.UTC)
    valid = (now - datetime.timedelta(hours=1), now + datetime.timedelta(days=valid_days))
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    ca_cert = _ca_certificate(ca_key, valid)
    broker_key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    broker_cert = _broker_certificate(broker_key, ca_key, ca_cert.subject, hosts, valid)
    pem = serialization.Encoding.PEM
    key_pem = broker_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    files.folder.mkdir(parents=True, exist_ok=True)
    _write_private(files.keystore, key_pem + broker_cert.public_bytes(pem) + ca_cert.public_bytes(pem))
    files.ca.write_bytes(ca_cert.public_bytes(pem))
    return files


def _ca_certificate(ca_key, valid: tuple[datetime.datetime, datetime.datetime]):
    """The self-signed test CA, which may sign certificates but no other CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kafka-audit test CA")])
    return (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )


def _broker_certificate(
    broker_key, ca_key, ca_name, hosts: tuple[str, ...], valid: tuple[datetime.datetime, datetime.datetime]
):
    """The broker's certificate, signed by the CA, naming `hosts` (IP addresses or DNS names) for server and
    client authentication."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    names = [x509.IPAddress(ipaddress.ip_address(host)) if _is_ip(host) else x509.DNSName(host) for host in hosts]
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(broker_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
# Kept plain so the `--add-scram` and JAAS syntaxes need no quoting.
CREDENTIAL_PATTERN = re.compile(r"\A[A-Za-z0-9._~-]{1,128}\Z")


@dataclass(frozen=True)
class ClusterSecurity:
    """A SASL_SSL listener with SCRAM users. The first user is also the broker's own (inter-broker).

    Passwords never print: repr shows the user names only.
    """

    users: Mapping[str, str] = field(repr=False)  # user name -> password
    mechanism: str = "SCRAM-SHA-512"

    def __post_init__(self) -> None:
        if self.mechanism not in SCRAM_MECHANISMS:
            raise ClusterError(f"security.mechanism: {self.mechanism!r} is not one of {', '.join(SCRAM_MECHANISMS)}")
        if not self.users:
            raise ClusterError("security.users: at least one SCRAM user is needed (the first is the broker's own)")
        for user, password in self.users.items():
            if not CREDENTIAL_PATTERN.match(user):
                raise ClusterError(
                    f"security.users: user name {user!r} must be 1-128 letters, digits, '.', '_', '~', '-'"
                )
            if not CREDENTIAL_PATTERN.match(password):
                raise ClusterError(
                    f"security.users[{user}]: the password must be 1-128 letters, digits, '.', '_', '~', '-'"
                )

    @property
    def broker_user(self) -> str:
        return next(iter(self.users))

    def __repr__(self) -> str:
        return f"ClusterSecurity(users={sorted(self.users)}, mechanism={self.mechanism!r})"
