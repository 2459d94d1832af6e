"""TLS between loglake's ZooKeeper clients and ZooKeeper (Kafka's KIP-515 settings).

Settings (Kafka's broker names; tools read the same keys from a properties file, see below)::

    zookeeper.ssl.client.enable                  true: connect with TLS (default false)
    zookeeper.clientCnxnSocket                   accepted: Kafka needs ...ClientCnxnSocketNetty
                                                 for TLS; loglake's client (kazoo) always can.
                                                 ...ClientCnxnSocketNIO with TLS is refused
                                                 (Kafka's NIO socket cannot speak TLS), any
                                                 other class is refused (Kafka cannot load it)
    zookeeper.ssl.keystore.location|password|type    the client certificate (mutual TLS)
    zookeeper.ssl.truststore.location|password|type  the CAs trusted for ZooKeeper's certificate
                                                 (none: the system's default CAs, as Java's
                                                 default cacerts)
    zookeeper.ssl.protocol                       TLSv1.2 (default), TLSv1.3 or TLS
    zookeeper.ssl.enabled.protocols              csv of TLSv1.2/TLSv1.3 (default: the protocol)
    zookeeper.ssl.cipher.suites                  csv of IANA/Java suite names (TLS 1.2 suites
                                                 map to OpenSSL's names; TLS 1.3 suites are
                                                 OpenSSL's defaults and cannot be narrowed)
    zookeeper.ssl.endpoint.identification.algorithm  HTTPS (default, case-insensitive): verify
                                                 that ZooKeeper's certificate names the host of
                                                 zookeeper.connect; empty: do not
    zookeeper.ssl.crl.enable / ocsp.enable       false only: Python's ssl module cannot fetch
                                                 revocation lists or ask OCSP responders, so
                                                 true is refused (not silently ignored)

Store types: PEM, PKCS12 and JKS, read by :mod:`loglake.keystores` (ZooKeeper's PEM layout: a
private key, encrypted with the store password or not, plus the certificate chain in one file;
a PEM truststore is a CA bundle). An unset type is decided as ZooKeeper does, by the file
name's extension (``.pem``/``.crt``, ``.p12``/``.pfx``, ``.jks``), else by the file's content
(:mod:`loglake.keystores` sniffs PEM, JKS and PKCS12, where ZooKeeper would refuse the file).
ZooKeeper has no key password: the keystore password decrypts the key (Kafka's documented
restriction).

Identity: with a client certificate and ZooKeeper's ``authProvider.x509``, the session's
ZooKeeper identity is ``x509:<subject DN>``; ``zookeeper.set.acl=true`` then gives loglake's
znodes creator-ALL for that identity (Kafka's ``zkTlsClientAuthEnabled``: TLS enabled, a
client socket class and a keystore location configured; :attr:`ZkTls.client_auth`).

Tools (CLI, console, registry, jobs, the migrator): a properties file holding these keys, named
by ``--zk-tls-config-file`` (Kafka's ``zookeeper-security-migration`` option; other keys in it
are ignored, as Kafka's tool does) or by the environment variable
``LOGLAKE_ZOOKEEPER_TLS_CONFIG_FILE`` (every tool), read by :func:`zk_tls_from_environment`.

How: :class:`ZkTlsHandler` is kazoo's threading handler whose ``create_connection`` wraps the
socket in our own :class:`ssl.SSLContext` (kazoo's own TLS path always adds the system CAs,
takes key files only by path and ignores protocol/cipher settings). The context is built once
per client; a certificate or handshake failure is recorded in ``handler.tls_failure`` (one line
naming the setting to fix) so that :func:`start_client` and the broker's start can stop with it
instead of retrying forever.

Pure besides reading the named store files; :class:`ZkTls` is immutable and thread-safe; a
handler belongs to one kazoo client.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kazoo.handlers import utils as kazoo_utils
from kazoo.handlers.threading import KazooTimeoutError, SequentialThreadingHandler

from loglake import keystores
from loglake.errors import InvalidConfigError
from loglake.properties import parse_properties

log = logging.getLogger(__name__)

ENABLE = "zookeeper.ssl.client.enable"
CNXN_SOCKET = "zookeeper.clientCnxnSocket"
KEYSTORE_LOCATION = "zookeeper.ssl.keystore.location"
KEYSTORE_PASSWORD = "zookeeper.ssl.keystore.password"
KEYSTORE_TYPE = "zookeeper.ssl.keystore.type"
TRUSTSTORE_LOCATION = "zookeeper.ssl.truststore.location"
TRUSTSTORE_PASSWORD = "zookeeper.ssl.truststore.password"
TRUSTSTORE_TYPE = "zookeeper.ssl.truststore.type"
PROTOCOL = "zookeeper.ssl.protocol"
ENABLED_PROTOCOLS = "zookeeper.ssl.enabled.protocols"
CIPHER_SUITES = "zookeeper.ssl.cipher.suites"
ENDPOINT_IDENTIFICATION = "zookeeper.ssl.endpoint.identification.algorithm"
CRL_ENABLE = "zookeeper.ssl.crl.enable"
OCSP_ENABLE = "zookeeper.ssl.ocsp.enable"
PROPERTY_NAMES = (ENABLE, CNXN_SOCKET, KEYSTORE_LOCATION, KEYSTORE_PASSWORD, KEYSTORE_TYPE,
                  TRUSTSTORE_LOCATION, TRUSTSTORE_PASSWORD, TRUSTSTORE_TYPE, PROTOCOL,
                  ENABLED_PROTOCOLS, CIPHER_SUITES, ENDPOINT_IDENTIFICATION, CRL_ENABLE,
                  OCSP_ENABLE)
"""Every property this module reads (Kafka's ``ZkConfigs.ZK_SSL_CONFIG_TO_SYSTEM_PROPERTY_MAP``
keys)."""

ENV_CONFIG_FILE = "LOGLAKE_ZOOKEEPER_TLS_CONFIG_FILE"
"""Environment variable naming a properties file with the keys above (tools)."""

NETTY = "org.apache.zookeeper.ClientCnxnSocketNetty"
NIO = "org.apache.zookeeper.ClientCnxnSocketNIO"
DEFAULT_PROTOCOL = "TLSv1.2"
DEFAULT_ENDPOINT_IDENTIFICATION = "HTTPS"

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_HOSTNAME_MISMATCH = (62, 64)  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH


@dataclass(frozen=True)
class ZkTls:
    """What a ZooKeeper client needs for TLS, read and checked once (:func:`resolve_zk_tls`).

    ``trust_pem``: the CA bundle (None: the system's default CAs); ``chain_pem``/``key_pem``:
    the client certificate chain and its unencrypted PKCS#8 key (None: no client certificate).
    """

    trust_pem: bytes | None = field(default=None, repr=False)
    chain_pem: bytes | None = field(default=None, repr=False)
    key_pem: bytes | None = field(default=None, repr=False)
    minimum: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    maximum: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    ciphers: str | None = None
    check_hostname: bool = True
    truststore: str | None = None
    """The truststore setting's value (for error messages)."""
    client_auth: bool = False
    """Kafka's ``zkTlsClientAuthEnabled``: a client socket class and a keystore location are
    configured, so the session has an x509 identity ``zookeeper.set.acl`` may rely on."""

    def context(self) -> ssl.SSLContext:
        """A new client context with these settings (the key goes through a private temporary
        file that is removed at once)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = self.minimum
        context.maximum_version = self.maximum
        context.check_hostname = self.check_hostname
        context.verify_mode = ssl.CERT_REQUIRED
        if self.trust_pem is None:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        else:
            context.load_verify_locations(cadata=self.trust_pem.decode("ascii"))
        if self.ciphers:
            context.set_ciphers(self.ciphers)
        if self.chain_pem is not None and self.key_pem is not None:
            keystores.load_into(context, keystores.KeyMaterial(self.chain_pem, self.key_pem))
        return context

    def handler(self) -> ZkTlsHandler:
        """A fresh kazoo handler speaking TLS with these settings (one per kazoo client)."""
        return ZkTlsHandler(self)


class ZkTlsHandler(SequentialThreadingHandler):  # kazoo is untyped
    """kazoo's threading handler whose connections are TLS with our context (see the module
    docstring). ``tls_failure``: the last handshake failure that retrying will not cure (an
    untrusted or misnamed certificate, a refused handshake), as one line; None otherwise."""

    def __init__(self, tls: ZkTls) -> None:
        super().__init__()
        self.tls = tls
        self._context = tls.context()
        self.tls_failure: str | None = None

    def create_connection(self, address: Any, hostname: str | None = None,
                          timeout: float | None = None, **_kazoo_tls: Any) -> socket.socket:
        """Connect to ``address`` (kazoo passes the resolved IP) and finish the TLS handshake
        (kazoo's own TLS arguments are ignored: the context decides). Host names: the
        certificate must name the host of the connect string or, as ZooKeeper's
        ``ZKTrustManager`` accepts too, the address connected to."""
        names = [hostname or address[0]]
        if self.tls.check_hostname and address[0] not in names:
            names.append(address[0])
        for index, name in enumerate(names):
            raw = socket.create_connection(address, timeout)
            try:
                conn = self._context.wrap_socket(raw, server_hostname=name)
            except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
                raw.close()
                raise  # the server went away mid-handshake: retry
            except ssl.SSLCertVerificationError as exc:
                raw.close()
                if exc.verify_code in _HOSTNAME_MISMATCH and index + 1 < len(names):
                    continue  # try the address
                self._failed(address, exc, names)
                raise
            except ssl.SSLError as exc:
                raw.close()
                self._failed(address, exc, names)
                raise
            except OSError:
                raw.close()
                raise
            self.tls_failure = None
            kazoo_utils._set_default_tcpsock_options(socket, conn)
            return conn
        raise AssertionError("unreachable: the last name's failure is raised")

    def _failed(self, address: Any, exc: ssl.SSLError, names: list[str]) -> None:
        where = f"ZooKeeper at {names[0]}:{address[1]}"
        reason = getattr(exc, "verify_message", None) or exc.reason or str(exc)
        if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_code in _HOSTNAME_MISMATCH:
            message = (f"{where}: its TLS certificate does not name {' or '.join(names)} "
                       f"({reason}); "
                       f"{ENDPOINT_IDENTIFICATION}=HTTPS verifies host names (empty: off)")
        elif isinstance(exc, ssl.SSLCertVerificationError):
            trusted = (f"{TRUSTSTORE_LOCATION} ({self.tls.truststore})" if self.tls.truststore
                       else f"the system's CAs ({TRUSTSTORE_LOCATION} is not set)")
            message = f"{where}: its TLS certificate is not trusted by {trusted}: {reason}"
        elif "PROTOCOL_VERSION" in str(reason).upper() or "VERSION" in str(reason).upper():
            message = (f"{where}: the TLS handshake failed ({reason}): no TLS version in "
                       f"common; check {PROTOCOL} / {ENABLED_PROTOCOLS}")
        else:
            message = (f"{where}: the TLS handshake failed ({reason}); check that it is "
                       f"ZooKeeper's secureClientPort and, if it needs a client certificate, "
                       f"{KEYSTORE_LOCATION}")
        if message != self.tls_failure:
            log.error("%s", message)
        self.tls_failure = message


def tls_failure(client: Any) -> str | None:
    """The handshake failure a kazoo client's handler recorded (None: none, or not TLS)."""
    failure = getattr(client.handler, "tls_failure", None)
    return failure if isinstance(failure, str) else None


def start_client(client: Any, timeout: float) -> None:
    """``client.start(timeout)``, but stop at once with InvalidConfigError (one line naming the
    setting) when the TLS handshake fails for a reason retrying will not cure. Raises kazoo's
    KazooTimeoutError (stopping and closing the client, as ``start`` does) when nothing
    connects in time."""
    connected = client.start_async()
    deadline = time.monotonic() + timeout
    while not connected.wait(0.05):
        failure = tls_failure(client)
        if failure is not None:
            client.stop()
            client.close()
            raise InvalidConfigError(failure)
        if time.monotonic() >= deadline:
            break
    if not client.connected:
        client.stop()
        client.close()  # as kazoo's start() does
        failure = tls_failure(client)
        if failure is not None:
            raise InvalidConfigError(failure)
        raise KazooTimeoutError("Connection time-out")


# ---- resolution
def _boolean(name: str, value: str | bool | None, default: bool) -> bool:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    if value.strip().lower() not in ("true", "false"):
        raise InvalidConfigError(f"{name} must be true or false, got {value!r}")
    return value.strip().lower() == "true"


def _csv(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def _versions(protocol: str | None, enabled: str | None) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    names = _csv(enabled) or [(protocol or DEFAULT_PROTOCOL).strip()]
    setting = ENABLED_PROTOCOLS if _csv(enabled) else PROTOCOL
    if names == ["TLS"]:
        return ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3
    unknown = [name for name in names if name not in _VERSIONS]
    if unknown:
        raise InvalidConfigError(
            f"{setting}: {', '.join(unknown)} is not supported (loglake speaks TLSv1.2 and "
            "TLSv1.3 only)")
    versions = sorted(_VERSIONS[name] for name in names)
    return versions[0], versions[-1]


def _openssl_cipher(suite: str) -> str | None:
    """The OpenSSL name of a TLS 1.2 IANA/Java suite name (None: not a TLS 1.2 form we map)."""
    if not suite.startswith("TLS_") or "_WITH_" not in suite:
        return None
    exchange, _, rest = suite[4:].partition("_WITH_")
    parts = rest.split("_")
    if len(parts) < 2:
        return None
    digest = parts[-1]
    bulk = parts[:-1]
    if bulk[0] == "AES" and len(bulk) >= 2:
        cipher = "-".join(["AES" + bulk[1], *bulk[2:]])
    else:
        cipher = "-".join(bulk)
    prefix = {"RSA": "", "ECDHE_RSA": "ECDHE-RSA-", "ECDHE_ECDSA": "ECDHE-ECDSA-",
              "DHE_RSA": "DHE-RSA-"}.get(exchange)
    if prefix is None:
        return None
    if cipher == "CHACHA20-POLY1305":
        return f"{prefix}{cipher}"
    return f"{prefix}{cipher}-{digest}"


def _ciphers(value: str | None) -> str | None:
    suites = _csv(value)
    if not suites:
        return None
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    known = {cipher["name"] for cipher in probe.get_ciphers()}
    tls13 = {name for name in known if name.startswith("TLS_") and "_WITH_" not in name}
    chosen: list[str] = []
    for suite in suites:
        if suite in tls13:
            continue  # OpenSSL's TLS 1.3 suites are on by default and cannot be narrowed here
        name = _openssl_cipher(suite)
        if name is None or name not in known:
            raise InvalidConfigError(
                f"{CIPHER_SUITES}: {suite} is not a cipher suite this OpenSSL offers")
        chosen.append(name)
    return ":".join(chosen) if chosen else None


_EXTENSIONS = {".pem": "PEM", ".crt": "PEM", ".p12": "PKCS12", ".pfx": "PKCS12", ".jks": "JKS"}
"""ZooKeeper's ``KeyStoreFileType.fromFilename``: an unset store type from the extension."""


def _store_type(location: str, store_type: str | None, setting: str) -> str | None:
    """The declared type (checked), else the one the extension gives, else None (then
    :mod:`loglake.keystores` decides by the content)."""
    declared = keystores.normalize_type(store_type, setting=setting)
    if declared is not None:
        return declared
    return _EXTENSIONS.get(os.path.splitext(location)[1].lower())


def _keystore(location: str, store_type: str | None, password: str | None
              ) -> tuple[bytes, bytes]:
    kind = _store_type(location, store_type, KEYSTORE_LOCATION)
    try:  # ZooKeeper has no key password: the keystore password decrypts the key too
        material = keystores.read_keystore(location, kind, password, password,
                                           setting=KEYSTORE_LOCATION)
    except InvalidConfigError as exc:
        raise InvalidConfigError(str(exc).replace(
            "zookeeper.ssl.key.password", f"{KEYSTORE_PASSWORD} (it also decrypts the key)")
        ) from None
    return material.chain_pem, material.key_pem


def _truststore(location: str, store_type: str | None, password: str | None) -> bytes:
    kind = _store_type(location, store_type, TRUSTSTORE_LOCATION)
    return keystores.read_truststore(location, kind, password, setting=TRUSTSTORE_LOCATION)


def resolve_zk_tls(values: Mapping[str, str | bool | None]) -> ZkTls | None:
    """The :class:`ZkTls` of the settings ``values`` (keys :data:`PROPERTY_NAMES`, missing or
    None = not set), None when ``zookeeper.ssl.client.enable`` is not true. Reads the stores
    now; raises InvalidConfigError (one line naming the setting, never a password) on bad
    input."""
    def get(name: str) -> str | None:
        value = values.get(name)
        if value is None or isinstance(value, bool):
            return None if value is None else str(value).lower()
        return value.strip() or None

    crl = _boolean(CRL_ENABLE, values.get(CRL_ENABLE), False)
    ocsp = _boolean(OCSP_ENABLE, values.get(OCSP_ENABLE), False)
    if not _boolean(ENABLE, values.get(ENABLE), False):
        return None
    for name, on in ((CRL_ENABLE, crl), (OCSP_ENABLE, ocsp)):
        if on:
            raise InvalidConfigError(
                f"{name}=true is not supported: Python's ssl module cannot fetch certificate "
                "revocation lists or ask OCSP responders (set it to false)")
    socket_class = get(CNXN_SOCKET)
    if socket_class is not None and socket_class not in (NETTY, "ClientCnxnSocketNetty"):
        if socket_class in (NIO, "ClientCnxnSocketNIO"):
            raise InvalidConfigError(
                f"{CNXN_SOCKET}={socket_class} cannot speak TLS ({ENABLE}=true): use {NETTY}")
        raise InvalidConfigError(f"{CNXN_SOCKET}: unknown class {socket_class!r} (use {NETTY})")
    if socket_class is None:
        log.warning("%s=true without %s: Kafka needs %s=%s for TLS; loglake's ZooKeeper "
                    "client speaks TLS without it", ENABLE, CNXN_SOCKET, CNXN_SOCKET, NETTY)
    minimum, maximum = _versions(get(PROTOCOL), get(ENABLED_PROTOCOLS))
    algorithm = values.get(ENDPOINT_IDENTIFICATION)
    algorithm = DEFAULT_ENDPOINT_IDENTIFICATION if algorithm is None else str(algorithm).strip()
    if algorithm and algorithm.upper() != "HTTPS":
        raise InvalidConfigError(
            f"{ENDPOINT_IDENTIFICATION}: {algorithm!r} is not supported (HTTPS, or empty to "
            "not verify host names)")
    trust_location = get(TRUSTSTORE_LOCATION)
    trust = (None if trust_location is None else
             _truststore(trust_location, get(TRUSTSTORE_TYPE), get(TRUSTSTORE_PASSWORD)))
    key_location = get(KEYSTORE_LOCATION)
    chain = key = None
    if key_location is not None:
        chain, key = _keystore(key_location, get(KEYSTORE_TYPE), get(KEYSTORE_PASSWORD))
    tls = ZkTls(trust_pem=trust, chain_pem=chain, key_pem=key, minimum=minimum,
                maximum=maximum, ciphers=_ciphers(get(CIPHER_SUITES)),
                check_hostname=bool(algorithm), truststore=trust_location,
                client_auth=socket_class is not None and key_location is not None)
    try:
        tls.context()  # refuse now what would fail at every connection
    except ssl.SSLError as exc:
        raise InvalidConfigError(
            f"{KEYSTORE_LOCATION if key_location else TRUSTSTORE_LOCATION}: "
            f"{exc.reason or exc}") from None
    return tls


def read_properties(path: str, *, setting: str = ENV_CONFIG_FILE) -> dict[str, str]:
    """The :data:`PROPERTY_NAMES` keys of the Java properties file ``path``
    (:mod:`loglake.properties`); other keys are ignored, as Kafka's ``--zk-tls-config-file``
    ignores them."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise InvalidConfigError(f"{setting}: cannot read {path}: {reason}") from None
    return {key: value for key, value in parse_properties(text).items()
            if key in PROPERTY_NAMES}


def zk_tls_from_properties(props: Mapping[str, str]) -> ZkTls | None:
    """:func:`resolve_zk_tls` of a tool's properties (keys matched case-insensitively, as
    Spark's options are)."""
    lowered = {key.lower(): value for key, value in props.items()}
    return resolve_zk_tls({name: lowered.get(name.lower()) for name in PROPERTY_NAMES})


def zk_tls_from_environment(environ: Mapping[str, str] | None = None) -> ZkTls | None:
    """The :class:`ZkTls` of the properties file ``$LOGLAKE_ZOOKEEPER_TLS_CONFIG_FILE`` names
    (None when unset)."""
    env = os.environ if environ is None else environ
    path = env.get(ENV_CONFIG_FILE)
    if not path:
        return None
    return resolve_zk_tls(read_properties(path))

