"""Certificates for secured dev clusters and tests: a private CA, broker and client certificates
for loopback, generated with ``cryptography``.

Files :func:`ensure_dev_certificates` keeps in a directory ``D`` (PEM; private keys mode 0600)::

    D/ca.pem          the CA certificate: what clients trust (ssl.ca.location /
                      ssl.truststore.location with ssl.truststore.type=PEM)
    D/ca-key.pem      the CA's private key (only to issue more certificates)
    D/broker.pem      the brokers' private key + certificate chain (ssl.keystore.location with
                      ssl.keystore.type=PEM); SANs: localhost, 127.0.0.1, ::1
    D/client.pem      a client's private key + certificate chain (CN=client), for
                      ssl.client.auth (ssl.certificate.location and ssl.key.location both name
                      it, or ssl.keystore.location with type PEM)

Keys are ECDSA P-256 (fast to make, accepted by OpenSSL, librdkafka and Python's ssl).
Certificates are valid from one hour ago (clock skew) for ``days`` days (default 825). Files
that exist are kept as long as the CA still verifies them and they are valid for another day,
so ``loglake dev up --security`` keeps the certificates clients already trust. Each file is
written to a temporary name and renamed, so a crash leaves the old file or the new one.
Blocking; safe from any thread (no shared state).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_DAYS = 825
LOOPBACK_DNS = ("localhost",)
LOOPBACK_IPS = ("127.0.0.1", "::1")
PrivateKey = ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class DevCertificates:
    """Paths of the files in the module docstring."""

    directory: Path
    ca: Path
    ca_key: Path
    broker: Path
    client: Path


@dataclass(frozen=True)
class Issued:
    """A private key and its certificate (``chain``: the certificate, then its issuers')."""

    key: PrivateKey
    certificate: x509.Certificate
    chain: tuple[x509.Certificate, ...] = ()

    def key_pem(self, password: bytes | None = None) -> bytes:
        encryption: serialization.KeySerializationEncryption = (
            serialization.NoEncryption() if password is None
            else serialization.BestAvailableEncryption(password))
        return self.key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8, encryption)

    def chain_pem(self) -> bytes:
        return b"".join(c.public_bytes(serialization.Encoding.PEM)
                        for c in (self.certificate, *self.chain))

    def keystore_pem(self, password: bytes | None = None) -> bytes:
        """Key + chain in one PEM file (Kafka's ``ssl.keystore.type=PEM`` layout)."""
        return self.key_pem(password) + self.chain_pem()


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "loglake dev"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _validity(days: int, now: dt.datetime | None) -> tuple[dt.datetime, dt.datetime]:
    start = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(hours=1)
    return start, start + dt.timedelta(days=days)


def make_ca(common_name: str = "loglake dev CA", *, days: int = DEFAULT_DAYS,
            now: dt.datetime | None = None) -> Issued:
    """A self-signed CA certificate (path length 0) and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = _validity(days, now)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name)).issuer_name(_name(common_name))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(key, certificate)


def issue(ca: Issued, common_name: str, *, server: bool = True, client: bool = True,
          dns_names: Sequence[str] = LOOPBACK_DNS, ip_addresses: Sequence[str] = LOOPBACK_IPS,
          days: int = DEFAULT_DAYS, now: dt.datetime | None = None) -> Issued:
    """A certificate for ``common_name`` signed by ``ca`` (server and/or client use; SANs for
    the given names and addresses)."""
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = _validity(days, now)
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name)).issuer_name(ca.certificate.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            ca.key.public_key()), critical=False)
    )
    alternatives: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    alternatives += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
    if alternatives:
        builder = builder.add_extension(x509.SubjectAlternativeName(alternatives),
                                        critical=False)
    return Issued(key, builder.sign(ca.key, hashes.SHA256()), (ca.certificate,))


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` with mode 0600 (temporary file, then rename)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)


def _load(path: Path) -> Issued | None:
    """Key and certificates of a PEM file written here; None if missing or unreadable."""
    try:
        data = path.read_bytes()
        key = serialization.load_pem_private_key(data, password=None)
        certificates = x509.load_pem_x509_certificates(data)
    except (OSError, ValueError):
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not certificates:
        return None
    return Issued(key, certificates[0], tuple(certificates[1:]))


def _still_good(issued: Issued | None, ca: Issued) -> bool:
    if issued is None:
        return False
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
    try:
        issued.certificate.verify_directly_issued_by(ca.certificate)
    except Exception:  # InvalidSignature, ValueError, TypeError: not issued by this CA
        return False
    return issued.certificate.not_valid_after_utc > soon


def ensure_dev_certificates(directory: Path, *, days: int = DEFAULT_DAYS) -> DevCertificates:
    """The CA, broker and client files in ``directory`` (module docstring): kept when still
    good, made otherwise (a new CA re-issues both others)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = DevCertificates(directory, directory / "ca.pem", directory / "ca-key.pem",
                            directory / "broker.pem", directory / "client.pem")
    ca = _load_ca(paths)
    if ca is None or ca.certificate.not_valid_after_utc < (
            dt.datetime.now(dt.UTC) + dt.timedelta(days=1)):
        ca = make_ca(days=days)
        write_private(paths.ca_key, ca.key_pem())
        write_private(paths.ca, ca.chain_pem())
        os.chmod(paths.ca, 0o644)
    for path, name in ((paths.broker, "localhost"), (paths.client, "client")):
        if not _still_good(_load(path), ca):
            write_private(path, issue(ca, name, server=name != "client",
                                      days=days).keystore_pem())
    return paths


def _load_ca(paths: DevCertificates) -> Issued | None:
    try:
        key = serialization.load_pem_private_key(paths.ca_key.read_bytes(), password=None)
        certificate = x509.load_pem_x509_certificate(paths.ca.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        return None
    return Issued(key, certificate)
