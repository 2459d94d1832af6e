"""Test certificates made at test time with ``cryptography`` (never committed).

:func:`make_tls_files` writes, into a directory of the test's own:

* ``ca.pem``: a test CA (the brokers' and clients' truststore);
* the broker's ``broker.keystore.pem`` (key + chain, as ``ssl.keystore.location`` wants),
  also split into ``broker.cert.pem`` / ``broker.key.pem``; SAN 127.0.0.1, ::1 and localhost;
* client identities (each ``<name>.cert.pem``, ``<name>.key.pem``, ``<name>.keystore.pem``):
  ``client`` (signed by the CA, subject ``CN=alice,OU=eng,O=loglake``), ``expired`` (signed by
  the CA, validity over a year ago), ``selfsigned`` (signs itself), ``untrusted`` (signed by
  another CA).

Keys are EC P-256 (fast to make); :func:`issue` makes more identities (any subject, key
password, validity). :func:`broker_ssl_settings` gives the broker properties of a TLS listener.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK_IPS = ("127.0.0.1", "::1")
LOOPBACK_NAMES = ("localhost",)


@dataclass(frozen=True)
class Identity:
    """A key and certificate on disk: separate PEM files, and key + chain in one."""

    cert: Path
    key: Path
    keystore: Path
    certificate: x509.Certificate
    private_key: ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class Authority:
    """A CA: its certificate file and its key (to sign with)."""

    cert: Path
    certificate: x509.Certificate
    private_key: ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class TlsFiles:
    directory: Path
    ca: Authority
    broker: Identity
    client: Identity
    expired: Identity
    selfsigned: Identity
    untrusted: Identity
    other_ca: Authority

    @property
    def ca_file(self) -> Path:
        return self.ca.cert


def _name(subject: str) -> x509.Name:
    """``CN=alice,OU=eng,O=loglake`` -> an X.509 name (the given order, most specific first as
    written; stored in reverse RFC 4514 order so it prints back the same)."""
    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
            "O": NameOID.ORGANIZATION_NAME, "L": NameOID.LOCALITY_NAME,
            "ST": NameOID.STATE_OR_PROVINCE_NAME, "C": NameOID.COUNTRY_NAME}
    parts = [part.split("=", 1) for part in subject.split(",")]
    return x509.Name([x509.NameAttribute(oids[key.strip()], value.strip())
                      for key, value in reversed(parts)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey, password: str | None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password
        else serialization.NoEncryption())
    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             encryption)
    path.write_bytes(data)
    path.chmod(0o600)
    return data


def make_authority(directory: Path, name: str = "ca", *,
                   subject: str = "CN=loglake test CA,O=loglake") -> Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(subject)).issuer_name(_name(subject))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Authority(path, cert, key)


def issue(directory: Path, name: str, subject: str, *, authority: Authority | None,
          server: bool = False, expired: bool = False, key_password: str | None = None,
          ips: tuple[str, ...] = LOOPBACK_IPS,
          dns_names: tuple[str, ...] = LOOPBACK_NAMES) -> Identity:
    """A certificate for ``subject`` signed by ``authority`` (None: self-signed), written as
    ``<name>.cert.pem``, ``<name>.key.pem`` and ``<name>.keystore.pem`` (key, then the
    certificate and the CA's: Kafka's PEM keystore layout)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    start, end = ((now - datetime.timedelta(days=400), now - datetime.timedelta(days=365))
                  if expired else (now - datetime.timedelta(days=1),
                                   now + datetime.timedelta(days=30)))
    issuer_name = authority.certificate.subject if authority else _name(subject)
    signing_key = authority.private_key if authority else key
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject)).issuer_name(issuer_name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(
            [usage, ExtendedKeyUsageOID.CLIENT_AUTH] if server else [usage]), critical=False)
    )
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName(n) for n in dns_names]
            + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]), critical=False)
    cert = builder.sign(signing_key, hashes.SHA256())
    directory.mkdir(parents=True, exist_ok=True)
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    chain = cert_pem + (authority.certificate.public_bytes(serialization.Encoding.PEM)
                        if authority else b"")
    cert_path = directory / f"{name}.cert.pem"
    cert_path.write_bytes(chain)
    key_path = directory / f"{name}.key.pem"
    key_pem = _write_key(key_path, key, key_password)
    keystore = directory / f"{name}.keystore.pem"
    keystore.write_bytes(key_pem + chain)
    keystore.chmod(0o600)
    return Identity(cert_path, key_path, keystore, cert, key)


CLIENT_SUBJECT = "CN=alice,OU=eng,O=loglake"
BROKER_SUBJECT = "CN=broker,O=loglake"


def make_tls_files(directory: Path) -> TlsFiles:
    """Everything a TLS test needs (see the module docstring)."""
    directory = Path(directory)
    ca = make_authority(directory)
    other = make_authority(directory, "other-ca", subject="CN=someone else's CA,O=elsewhere")
    return TlsFiles(
        directory=directory, ca=ca,
        broker=issue(directory, "broker", BROKER_SUBJECT, authority=ca, server=True),
        client=issue(directory, "client", CLIENT_SUBJECT, authority=ca),
        expired=issue(directory, "expired", "CN=old,O=loglake", authority=ca, expired=True),
        selfsigned=issue(directory, "selfsigned", "CN=mallory,O=loglake", authority=None),
        untrusted=issue(directory, "untrusted", "CN=eve,O=elsewhere", authority=other),
        other_ca=other,
    )


def broker_ssl_settings(files: TlsFiles, *, client_auth: str = "none",
                        listener: str | None = None) -> dict[str, str]:
    """Broker properties for TLS: keystore, truststore and ``ssl.client.auth``, broker-wide or
    (``listener``) as ``listener.name.<listener>.`` settings."""
    prefix = f"listener.name.{listener.lower()}." if listener else ""
    return {
        f"{prefix}ssl.keystore.location": str(files.broker.keystore),
        f"{prefix}ssl.keystore.type": "PEM",
        f"{prefix}ssl.truststore.location": str(files.ca.cert),
        f"{prefix}ssl.truststore.type": "PEM",
        f"{prefix}ssl.client.auth": client_auth,
    }
