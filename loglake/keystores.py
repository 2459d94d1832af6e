"""Kafka's TLS keystores and truststores (PEM, PKCS12, JKS/JCEKS) read into PEM for Python's ssl.

Python's :mod:`ssl` loads only PEM files; Kafka operators' ``server.properties`` and
``client.properties`` name ``.jks`` / ``.p12`` stores with ``ssl.keystore.password``,
``ssl.key.password`` and ``ssl.truststore.password``. This module is the one place that turns
any of them into PEM bytes, shared by the broker (listeners, its own client side), the SDK/CLI,
the catalog (ZooKeeper TLS) and dev code.

Store types (``store_type``, case-insensitive):

* ``PEM``: a keystore file holds the private key (PKCS#8 or traditional, encrypted with the key
  password or not) and the certificate chain, leaf first; a truststore file holds CA
  certificates. A store password is not used for PEM (Kafka refuses one; here it is ignored).
* ``PKCS12``: read with ``cryptography``; the store password decrypts the store (the key
  password is used when no store password is given: PKCS#12 keys share the store's password).
* ``JKS`` (and ``JCEKS``, which the same reader understands): read with ``pyjks``; the store
  password checks the store's integrity, each private-key entry is decrypted with the key
  password (Kafka's ``ssl.key.password``; when not set, the store password, as Kafka does).
  A keystore's first private-key entry (by alias order) is used; a truststore takes every
  trusted-certificate entry (and the chains of private-key entries, as Java's TrustManager does).
* ``None`` ("not set"): the type is decided by the file's content: JKS magic ``0xFEEDFEED`` or
  JCEKS magic ``0xCECECECE`` -> JKS, PEM armour (``-----BEGIN ``) -> PEM, else PKCS12. Kafka
  would assume JKS; sniffing accepts every file Kafka accepts (and PEM/PKCS12 files without
  their type set).

Kafka's KIP-651 inline PEM settings (``ssl.keystore.key`` + ``ssl.keystore.certificate.chain``,
``ssl.truststore.certificates``) are read by :func:`keystore_from_pem` and
:func:`truststore_from_pem`.

Output: :class:`KeyMaterial` (leaf certificate first, then its chain; the private key as
unencrypted PKCS#8 PEM) and, for truststores, a PEM bundle of CA certificates. Errors: every
unusable input (a missing or unreadable file, a wrong store or key password, a keystore without
a private-key entry, a truststore without certificates, an unknown type, a key that does not
belong to its certificate) raises :class:`~loglake.errors.InvalidConfigError` with ONE line
naming the setting (and ``where``, e.g. a listener, when the caller gives it) -- never a
password. :func:`load_into` loads material into an ``ssl.SSLContext`` through a 0600 file in a
private temporary directory that is removed at once.

Blocking (file reads, key derivation): call at start-up or from a worker thread, never on an
event loop. Pure functions, thread-safe.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import jks
from cryptography import x509
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_der_private_key,
    load_pem_private_key,
    pkcs12,
)

from loglake.errors import InvalidConfigError

PEM = "PEM"
PKCS12 = "PKCS12"
JKS = "JKS"
JCEKS = "JCEKS"
STORE_TYPES = (PEM, PKCS12, JKS, JCEKS)
"""The accepted values of ``ssl.keystore.type`` / ``ssl.truststore.type`` (any case)."""

JKS_MAGIC = b"\xfe\xed\xfe\xed"
JCEKS_MAGIC = b"\xce\xce\xce\xce"
_PEM_ARMOUR = b"-----BEGIN "
_KEY_BLOCK = re.compile(
    rb"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY)-----.*?-----END \1-----", re.DOTALL)
_CERT_BLOCK = re.compile(
    rb"-----BEGIN (?:X509 |TRUSTED )?CERTIFICATE-----.*?-----END (?:X509 |TRUSTED )?"
    rb"CERTIFICATE-----", re.DOTALL)


@dataclass(frozen=True)
class KeyMaterial:
    """A private key and its certificate chain, as PEM (see the module docstring)."""

    chain_pem: bytes
    """Leaf certificate first, then its chain."""
    key_pem: bytes = field(repr=False)
    """Unencrypted PKCS#8 PEM private key."""


def _where(setting: str, location: str | None, where: str | None) -> str:
    place = f"{setting} {location}" if location is not None else setting
    return f"{place} ({where})" if where else place


def normalize_type(store_type: str | None, *, setting: str, where: str | None = None
                   ) -> str | None:
    """``store_type`` upper-cased and checked (None or empty: not set)."""
    if store_type is None or not store_type.strip():
        return None
    upper = store_type.strip().upper()
    if upper not in STORE_TYPES:
        type_setting = setting.replace(".location", ".type")
        raise InvalidConfigError(
            f"{_where(type_setting, None, where)}: unknown store type {store_type.strip()!r} "
            f"(one of PEM, PKCS12, JKS)")
    return upper


def sniff_type(data: bytes) -> str:
    """The store type of a file's content: JKS/JCEKS magic, PEM armour, else PKCS12."""
    if data[:4] == JKS_MAGIC:
        return JKS
    if data[:4] == JCEKS_MAGIC:
        return JCEKS
    if _PEM_ARMOUR in data:
        return PEM
    return PKCS12


def _read(location: str, setting: str, where: str | None) -> bytes:
    try:
        return Path(location).read_bytes()
    except FileNotFoundError:
        raise InvalidConfigError(f"{_where(setting, location, where)} does not exist") from None
    except IsADirectoryError:
        raise InvalidConfigError(
            f"{_where(setting, location, where)} is a directory, not a store file") from None
    except OSError as exc:
        raise InvalidConfigError(
            f"{_where(setting, location, where)} cannot be read: {exc.strerror}") from None


def store_type_of(location: str, store_type: str | None, *, setting: str,
                  where: str | None = None) -> str:
    """The type of the store file at ``location``: ``store_type`` when set (checked), else
    sniffed from the content. Raises :class:`InvalidConfigError` for a missing file."""
    declared = normalize_type(store_type, setting=setting, where=where)
    return declared if declared is not None else sniff_type(_read(location, setting, where))


def _store_type(data: bytes, store_type: str | None, setting: str, where: str | None) -> str:
    declared = normalize_type(store_type, setting=setting, where=where)
    return sniff_type(data) if declared is None else declared


def _cert_pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(Encoding.PEM)


def _key_pkcs8(key: object) -> bytes:
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())  # type: ignore[attr-defined]


def _check_pair(key: object, leaf: x509.Certificate, place: str) -> None:
    mine = key.public_key().public_bytes(  # type: ignore[attr-defined]
        Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    theirs = leaf.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    if mine != theirs:
        raise InvalidConfigError(
            f"{place}: the private key does not belong to the first (leaf) certificate")


def _normal_block(block: bytes, label: bytes) -> bytes:
    """A PEM block re-wrapped in 64-column lines: inline PEM values in a ``.properties`` file
    arrive on one line (continuation lines joined with spaces), as Kafka accepts them. Blocks
    with RFC 1421 headers (``Proc-Type:``) are left as they are."""
    if b":" in block:
        return block
    body = re.sub(rb"-----(BEGIN|END) [A-Z0-9 ]+-----", b"", block)
    body = b"".join(body.split())
    lines = [body[i:i + 64] for i in range(0, len(body), 64)]
    return b"\n".join([b"-----BEGIN " + label + b"-----", *lines,
                       b"-----END " + label + b"-----", b""])


def _pem_certificates(data: bytes, place: str) -> list[x509.Certificate]:
    certificates = []
    for block in _CERT_BLOCK.findall(data):
        normal = _normal_block(block, b"CERTIFICATE")
        try:
            certificates.append(x509.load_pem_x509_certificate(normal))
        except ValueError:
            raise InvalidConfigError(f"{place}: holds a malformed PEM certificate") from None
    return certificates


def _pem_key(data: bytes, key_password: str | None, place: str, password_setting: str
             ) -> object:
    blocks = list(_KEY_BLOCK.finditer(data))
    if not blocks:
        raise InvalidConfigError(f"{place}: holds no PEM private key")
    try:
        return load_pem_private_key(_normal_block(blocks[0].group(0), blocks[0].group(1)),
                                    key_password.encode() if key_password else None)
    except TypeError:
        if key_password:
            raise InvalidConfigError(
                f"{place}: the private key is not encrypted but {password_setting} is "
                f"set") from None
        raise InvalidConfigError(
            f"{place}: the private key is encrypted: set {password_setting}") from None
    except ValueError:
        if key_password:
            raise InvalidConfigError(
                f"{place}: wrong {password_setting} (cannot decrypt the private key)") from None
        raise InvalidConfigError(f"{place}: the PEM private key is malformed") from None


def _material(key: object, chain: list[x509.Certificate], place: str) -> KeyMaterial:
    if not chain:
        raise InvalidConfigError(f"{place}: holds a private key but no certificate")
    _check_pair(key, chain[0], place)
    return KeyMaterial(b"".join(_cert_pem(c) for c in chain), _key_pkcs8(key))


def _load_jks(data: bytes, store_password: str | None, place: str, password_setting: str,
              *, require_password: bool) -> jks.KeyStore:
    """A JKS/JCEKS store; without a password (truststores only) the integrity check is
    skipped, as Java's KeyStore.load(stream, null) does."""
    if store_password is None and require_password:
        raise InvalidConfigError(f"{place}: a JKS keystore needs {password_setting}")
    try:
        return jks.KeyStore.loads(data, store_password, try_decrypt_keys=False)
    except jks.KeystoreSignatureException:
        raise InvalidConfigError(f"{place}: wrong {password_setting} (the store's integrity "
                                 f"check failed)") from None
    except (jks.KeystoreException, ValueError, EOFError, IndexError) as exc:
        raise InvalidConfigError(
            f"{place}: not a readable JKS/JCEKS store ({type(exc).__name__})") from None


def _load_pkcs12(data: bytes, password: str | None, place: str, password_setting: str
                 ) -> tuple[object | None, list[x509.Certificate]]:
    """The key (or None) and every certificate, the key's own first."""
    try:
        key, certificate, extra = pkcs12.load_key_and_certificates(
            data, password.encode() if password else None)
    except ValueError:
        if password is None:
            raise InvalidConfigError(
                f"{place}: cannot read it as PKCS12 without {password_setting} (or it is not a "
                f"PKCS12/JKS/PEM store)") from None
        raise InvalidConfigError(
            f"{place}: wrong {password_setting}, or not a PKCS12/JKS/PEM store") from None
    except Exception as exc:  # cryptography raises assorted types on bad DER
        raise InvalidConfigError(
            f"{place}: not a readable PKCS12 store ({type(exc).__name__})") from None
    certificates = ([certificate] if certificate is not None else []) + list(extra)
    return key, certificates


def read_keystore(location: str, store_type: str | None, store_password: str | None,
                  key_password: str | None, *, setting: str = "ssl.keystore.location",
                  where: str | None = None) -> KeyMaterial:
    """The private key and certificate chain of a keystore file (PEM, PKCS12, JKS/JCEKS;
    ``store_type=None``: decided by the content, see the module docstring).

    ``setting`` names the location setting in errors (``ssl.keystore.location``,
    ``zookeeper.ssl.keystore.location``, ...); the password settings named in errors are
    derived from it. Raises :class:`InvalidConfigError` (one line, no password)."""
    place = _where(setting, location, where)
    prefix = setting[: -len("keystore.location")] if setting.endswith(
        "keystore.location") else "ssl."
    store_setting, key_setting = f"{prefix}keystore.password", f"{prefix}key.password"
    data = _read(location, setting, where)
    kind = _store_type(data, store_type, setting, where)
    if kind == PEM:
        key = _pem_key(data, key_password, place, key_setting)
        return _material(key, _pem_certificates(data, place), place)
    if kind == PKCS12:
        password = store_password if store_password is not None else key_password
        key, certificates = _load_pkcs12(data, password, place, store_setting)
        if key is None:
            raise InvalidConfigError(f"{place}: the PKCS12 store holds no private key entry")
        return _material(key, certificates, place)
    store = _load_jks(data, store_password, place, store_setting, require_password=True)
    entries = sorted(store.private_keys.items())
    if not entries:
        raise InvalidConfigError(f"{place}: the {kind} store holds no private key entry")
    _alias, entry = entries[0]
    password = key_password if key_password is not None else store_password
    try:
        entry.decrypt(password or "")
    except Exception:  # pyjks raises DecryptionFailureException and others
        raise InvalidConfigError(
            f"{place}: wrong {key_setting} (cannot decrypt the private key entry"
            f"{'' if key_password is not None else '; not set: the store password was tried'}"
            f")") from None
    try:
        key = load_der_private_key(entry.pkey_pkcs8, None)
        chain = [x509.load_der_x509_certificate(der) for _t, der in entry.cert_chain]
    except ValueError:
        raise InvalidConfigError(f"{place}: the private key entry is malformed") from None
    return _material(key, chain, place)


def read_truststore(location: str, store_type: str | None, store_password: str | None, *,
                    setting: str = "ssl.truststore.location", where: str | None = None
                    ) -> bytes:
    """The CA certificates of a truststore file as one PEM bundle (PEM, PKCS12, JKS/JCEKS;
    ``store_type=None``: decided by the content). Raises :class:`InvalidConfigError`."""
    place = _where(setting, location, where)
    prefix = setting[: -len("truststore.location")] if setting.endswith(
        "truststore.location") else "ssl."
    store_setting = f"{prefix}truststore.password"
    data = _read(location, setting, where)
    kind = _store_type(data, store_type, setting, where)
    if kind == PEM:
        certificates = _pem_certificates(data, place)
    elif kind == PKCS12:
        _key, certificates = _load_pkcs12(data, store_password, place, store_setting)
    else:
        store = _load_jks(data, store_password, place, store_setting,
                          require_password=False)
        try:
            ders = [entry.cert for _a, entry in sorted(store.certs.items())]
            ders += [der for _a, entry in sorted(store.private_keys.items())
                     for _t, der in entry.cert_chain]
            certificates = [x509.load_der_x509_certificate(der) for der in ders]
        except ValueError:
            raise InvalidConfigError(f"{place}: holds a malformed certificate") from None
    if not certificates:
        raise InvalidConfigError(f"{place}: the truststore holds no certificates")
    return b"".join(_cert_pem(c) for c in certificates)


def keystore_from_pem(key_pem: str | bytes, chain_pem: str | bytes, key_password: str | None,
                      *, setting: str = "ssl.keystore.key", where: str | None = None
                      ) -> KeyMaterial:
    """Kafka's inline PEM keystore (KIP-651): ``ssl.keystore.key`` (encrypted with
    ``ssl.key.password`` or not) and ``ssl.keystore.certificate.chain``."""
    place = _where(setting, None, where)
    prefix = setting[: -len("keystore.key")] if setting.endswith("keystore.key") else "ssl."
    key_data = key_pem.encode() if isinstance(key_pem, str) else key_pem
    chain_data = chain_pem.encode() if isinstance(chain_pem, str) else chain_pem
    key = _pem_key(key_data, key_password, place, f"{prefix}key.password")
    chain_place = _where(f"{prefix}keystore.certificate.chain", None, where)
    return _material(key, _pem_certificates(chain_data, chain_place), chain_place)


def truststore_from_pem(certificates: str | bytes, *,
                        setting: str = "ssl.truststore.certificates",
                        where: str | None = None) -> bytes:
    """Kafka's inline PEM truststore (KIP-651 ``ssl.truststore.certificates``), checked."""
    data = certificates.encode() if isinstance(certificates, str) else certificates
    place = _where(setting, None, where)
    parsed = _pem_certificates(data, place)
    if not parsed:
        raise InvalidConfigError(f"{place}: holds no PEM certificates")
    return b"".join(_cert_pem(c) for c in parsed)


def load_into(context: ssl.SSLContext, material: KeyMaterial) -> None:
    """``context.load_cert_chain`` with ``material``: written to a 0600 file in a private
    (0700) temporary directory, loaded, and removed before returning."""
    with tempfile.TemporaryDirectory(prefix="loglake-tls-") as folder:
        path = Path(folder) / "keystore.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(material.key_pem + material.chain_pem)
        context.load_cert_chain(str(path))
