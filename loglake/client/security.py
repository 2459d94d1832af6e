"""Client security settings: the ONE translation from Kafka client properties to the settings
of the clients loglake drives (librdkafka through confluent-kafka, and Python's ``ssl`` plus
SASL for the raw requests of :mod:`loglake.client._wire`).

Input is what Kafka's tools take with ``--command-config`` (a Java ``.properties`` file, read by
:func:`read_properties`) or the same keys in a mapping, in the Java client's names or
librdkafka's, mixed freely:

===================================  ===========================================================
``security.protocol``                ``PLAINTEXT`` (default) | ``SSL`` | ``SASL_PLAINTEXT`` |
                                     ``SASL_SSL`` (any case)
``sasl.mechanism``                   ``PLAIN`` | ``SCRAM-SHA-256`` | ``SCRAM-SHA-512``
                                     (librdkafka's ``sasl.mechanisms`` too); default: PLAIN
                                     when the JAAS login module is PlainLoginModule, else
                                     required
``sasl.username``, ``sasl.password``  librdkafka's (and loglake's simple) form of the
                                     credentials; or
``sasl.jaas.config``                 Java's: ``org.apache.kafka.common.security.scram.
                                     ScramLoginModule required username="u" password="p";``
                                     (``...plain.PlainLoginModule`` for PLAIN). Other login
                                     modules (Kerberos, OAuth) are refused.
``ssl.ca.location``                  PEM file of the CA certificates to trust (librdkafka)
``ssl.truststore.location``,         Java: the truststore: PEM bundle, PKCS12 or JKS store
``ssl.truststore.type``,             (type not set: decided by the file's content;
``ssl.truststore.password``          PKCS12/JKS are read by :mod:`loglake.keystores` into
                                     PEM, for librdkafka as ``ssl.ca.pem``); default: the
                                     system's CAs
``ssl.truststore.certificates``      inline PEM CA certificates (Java, type PEM) =
                                     librdkafka's ``ssl.ca.pem``
``ssl.certificate.location``,        client certificate (chain) and private key in PEM
``ssl.key.location``,                (librdkafka); ``ssl.key.password`` decrypts the key
``ssl.key.password``
``ssl.keystore.location``            Java: with ``ssl.keystore.type=PEM`` one PEM file holding
                                     the key and the certificate chain (used as both of the
                                     above); with ``PKCS12`` a PKCS#12 file with
                                     ``ssl.keystore.password`` (librdkafka reads it itself);
                                     with ``JKS`` a Java keystore with
                                     ``ssl.keystore.password`` and ``ssl.key.password`` (read
                                     into inline PEM); type not set: decided by the file's
                                     content (PKCS12 when it cannot be read)
``ssl.keystore.certificate.chain``,  inline PEM (Java, type PEM) = librdkafka's
``ssl.keystore.key``                 ``ssl.certificate.pem`` / ``ssl.key.pem``
``ssl.endpoint.identification.``     ``https`` (default: the broker's certificate must name
``algorithm``                        the host connected to) | empty or ``none`` (do not check)
===================================  ===========================================================

Schema registry settings (``schema.registry.*``, ``basic.auth.*``: see
:mod:`loglake.client.schema_registry`) may share the file and are left out here.
Keys of the Java client with no librdkafka counterpart (``ssl.truststore.type``,
``ssl.keystore.type``, ``ssl.truststore.password``: read above, then dropped; ``ssl.protocol``,
``ssl.enabled.protocols``, ``*.serializer``, ...: :data:`IGNORED_JAVA_KEYS`) are dropped;
every other key is kept in :attr:`SecurityConfig.other` and passed to librdkafka unchanged (it
refuses keys it does not know, naming them). Paths are used as given (relative ones from the
working directory, as Kafka's tools do).

Clients connect with TLS 1.2 or newer. :class:`SecurityConfig` is immutable and picklable
(Spark ships it to workers); it holds passwords, so its ``repr`` leaves them out. Parsing does no
I/O except :func:`read_properties` and :meth:`SecurityConfig.load`; :meth:`ssl_context` reads
the files it names, and :meth:`librdkafka` reads JKS/PKCS12 truststores, JKS keystores and
keystores or truststores without a type (to learn it). An unusable store (wrong password, no key
entry, unknown type, missing file) raises :class:`SecurityConfigError` with one line naming the
setting. Thread-safe (no shared state).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kio.schema.errors import ErrorCode

from loglake import keystores
from loglake.errors import InvalidConfigError, LoglakeError
from loglake.properties import parse_properties

Protocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
PROTOCOLS: tuple[Protocol, ...] = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

COMMAND_CONFIG_ENV = "LOGLAKE_COMMAND_CONFIG"
"""Environment variable naming a client properties file (used when no ``--command-config``)."""

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

IGNORED_JAVA_KEYS = frozenset({
    "ssl.truststore.type", "ssl.keystore.type", "ssl.truststore.password",
    "ssl.protocol", "ssl.enabled.protocols", "ssl.provider", "ssl.cipher.suites",
    "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm", "ssl.secure.random.implementation",
    "ssl.engine.factory.class", "sasl.login.class", "sasl.client.callback.handler.class",
    "sasl.login.callback.handler.class",
    "key.serializer", "value.serializer", "key.deserializer", "value.deserializer",
})
"""Java client keys with no librdkafka counterpart that are safe to drop (the store types and
the truststore password are read by :func:`_tls` first)."""

_SECURITY_KEYS = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
    "sasl.jaas.config", "ssl.ca.location", "ssl.ca.pem", "ssl.truststore.location",
    "ssl.truststore.certificates", "ssl.certificate.location", "ssl.key.location",
    "ssl.key.password", "ssl.certificate.pem", "ssl.key.pem", "ssl.keystore.location",
    "ssl.keystore.password", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.endpoint.identification.algorithm",
})
"""Keys this module translates (everything else goes to :attr:`SecurityConfig.other`)."""


def _registry_key(key: str) -> bool:
    """A schema registry client setting (``schema.registry.*``, ``basic.auth.*``; read by
    :mod:`loglake.client.schema_registry`), never a librdkafka one."""
    return key.startswith(("schema.registry.", "basic.auth."))


class SecurityConfigError(LoglakeError):
    """Client security settings that cannot be used (unknown protocol, missing credentials,
    unsupported store type, unreadable properties file)."""

    code = ErrorCode.invalid_config


@dataclass(frozen=True)
class JaasConfig:
    """One login module entry of a ``sasl.jaas.config`` value."""

    login_module: str
    flag: str
    options: Mapping[str, str] = field(repr=False)


@dataclass(frozen=True)
class SecurityConfig:
    """How a client connects: protocol, SASL credentials, TLS material (see the module
    docstring for the keys each field comes from)."""

    protocol: Protocol = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ca_location: str | None = None
    ca_pem: str | None = field(default=None, repr=False)
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: str | None = field(default=None, repr=False)
    certificate_pem: str | None = field(default=None, repr=False)
    key_pem: str | None = field(default=None, repr=False)
    keystore_location: str | None = None
    """A PKCS#12 or JKS keystore (key + certificate chain)."""
    keystore_password: str | None = field(default=None, repr=False)
    keystore_type: str | None = None
    """``PKCS12``, ``JKS``, ``JCEKS`` or None (not set: decided by the file's content)."""
    truststore_type: str | None = None
    """The type of the truststore at :attr:`ca_location` (``PEM``, ``PKCS12``, ``JKS``,
    ``JCEKS``; None: decided by the content when it is a file)."""
    truststore_password: str | None = field(default=None, repr=False)
    verify_hostname: bool = True
    other: Mapping[str, str] = field(default_factory=dict, repr=False)
    """Keys this module does not translate, for librdkafka unchanged."""

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> SecurityConfig:
        """The settings a mapping of client properties (Java or librdkafka names) describes.

        Raises :class:`SecurityConfigError` naming the key at fault."""
        props = {str(k).strip(): str(v).strip() for k, v in properties.items() if v is not None}
        raw_protocol = props.get("security.protocol", "PLAINTEXT").upper() or "PLAINTEXT"
        if raw_protocol not in PROTOCOLS:
            raise SecurityConfigError(
                f"security.protocol must be one of {', '.join(PROTOCOLS)}, got "
                f"{props['security.protocol']!r}")
        protocol: Protocol = raw_protocol
        values: dict[str, Any] = {"protocol": protocol}
        if protocol.startswith("SASL_"):
            values.update(_sasl(props))
        elif any(k.startswith("sasl.") and k in _SECURITY_KEYS for k in props):
            raise SecurityConfigError(
                f"SASL settings given but security.protocol is {protocol}",
                hint="set security.protocol=SASL_SSL (or SASL_PLAINTEXT)")
        if protocol in ("SSL", "SASL_SSL"):
            values.update(_tls(props))
        elif any(k.startswith("ssl.") and k in _SECURITY_KEYS for k in props):
            raise SecurityConfigError(
                f"TLS settings given but security.protocol is {protocol}",
                hint="set security.protocol=SSL (or SASL_SSL)")
        values["other"] = {k: v for k, v in props.items()
                           if k not in _SECURITY_KEYS and k not in IGNORED_JAVA_KEYS
                           and not _registry_key(k)}
        return cls(**values)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SecurityConfig:
        """The settings of a client properties file (``--command-config``)."""
        return cls.from_properties(read_properties(path))

    def without_other(self) -> SecurityConfig:
        """The same security settings without the untranslated keys."""
        return dataclasses.replace(self, other={})

    # -- use ---------------------------------------------------------------------------------

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def with_stores_read(self) -> SecurityConfig:
        """This config with JKS/PKCS12 truststores read into :attr:`ca_pem`, JKS keystores
        into :attr:`certificate_pem`/:attr:`key_pem` and untyped stores' types decided by
        their content (a PEM keystore becomes the certificate and key location; a PKCS12
        keystore stays, librdkafka reads it). Reads files; raises SecurityConfigError."""
        if not self.uses_tls:
            return self
        try:
            return self._read_stores()
        except InvalidConfigError as exc:
            raise SecurityConfigError(exc.message) from None

    def _read_stores(self) -> SecurityConfig:
        values: dict[str, Any] = {}
        trust_type = self.truststore_type
        if self.ca_location is not None and trust_type is None and os.path.isfile(
                self.ca_location):
            trust_type = keystores.store_type_of(self.ca_location, None,
                                                 setting="ssl.truststore.location")
        if self.ca_location is not None and trust_type not in (None, keystores.PEM):
            bundle = keystores.read_truststore(self.ca_location, trust_type,
                                               self.truststore_password).decode()
            values.update(ca_location=None, truststore_type=None,
                          ca_pem=bundle if self.ca_pem is None else self.ca_pem + "\n" + bundle)
        key_type = self.keystore_type
        if self.keystore_location is not None and key_type is None:
            key_type = (keystores.store_type_of(self.keystore_location, None,
                                                setting="ssl.keystore.location")
                        if os.path.isfile(self.keystore_location) else keystores.PKCS12)
        if self.keystore_location is not None and key_type == keystores.PEM:
            values.update(certificate_location=self.keystore_location,
                          key_location=self.keystore_location, keystore_location=None,
                          keystore_password=None, keystore_type=None)
        elif self.keystore_location is not None and key_type in (keystores.JKS, keystores.JCEKS):
            material = keystores.read_keystore(self.keystore_location, key_type,
                                               self.keystore_password, self.key_password)
            values.update(certificate_pem=material.chain_pem.decode(),
                          key_pem=material.key_pem.decode(), key_password=None,
                          keystore_location=None, keystore_password=None, keystore_type=None)
        return dataclasses.replace(self, **values) if values else self

    def librdkafka(self) -> dict[str, str]:
        """The librdkafka (confluent-kafka) settings: translated keys, then :attr:`other`
        (stores librdkafka cannot read are read first: :meth:`with_stores_read`)."""
        if self.uses_tls:
            return self.with_stores_read()._librdkafka()
        return self._librdkafka()

    def _librdkafka(self) -> dict[str, str]:
        config: dict[str, str] = {}
        if self.protocol != "PLAINTEXT":
            config["security.protocol"] = self.protocol
        if self.uses_sasl:
            assert self.sasl_mechanism and self.sasl_username is not None
            config["sasl.mechanism"] = self.sasl_mechanism
            config["sasl.username"] = self.sasl_username
            config["sasl.password"] = self.sasl_password or ""
        if self.uses_tls:
            for key, value in (
                ("ssl.ca.location", self.ca_location), ("ssl.ca.pem", self.ca_pem),
                ("ssl.certificate.location", self.certificate_location),
                ("ssl.key.location", self.key_location),
                ("ssl.key.password", self.key_password),
                ("ssl.certificate.pem", self.certificate_pem), ("ssl.key.pem", self.key_pem),
                ("ssl.keystore.location", self.keystore_location),
                ("ssl.keystore.password", self.keystore_password),
            ):
                if value is not None:
                    config[key] = value
            config["ssl.endpoint.identification.algorithm"] = (
                "https" if self.verify_hostname else "none")
        config.update(self.other)
        return config

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client TLS context (TLS 1.2+, the configured CAs or the system's, the client
        certificate if any, host name checking as configured); ``None`` without TLS.

        Reads the files named; raises :class:`SecurityConfigError` when one cannot be used."""
        if not self.uses_tls:
            return None
        stores = self.with_stores_read()
        try:
            if stores.ca_location is not None or stores.ca_pem is not None:
                context = ssl.create_default_context(cafile=stores.ca_location,
                                                     cadata=stores.ca_pem)
            else:
                context = ssl.create_default_context()
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.check_hostname = stores.verify_hostname
            if stores.certificate_location is not None or stores.certificate_pem is not None:
                _load_pem_chain(context, stores)
            elif stores.keystore_location is not None:
                keystores.load_into(context, keystores.read_keystore(
                    stores.keystore_location, stores.keystore_type or keystores.PKCS12,
                    stores.keystore_password, stores.key_password))
        except InvalidConfigError as exc:
            raise SecurityConfigError(exc.message) from None
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise SecurityConfigError(f"cannot set up TLS from the client settings: {exc}",
                                      hint="check the ssl.* files and passwords") from None
        return context


# -- parsing pieces --------------------------------------------------------------------------


def _sasl(props: Mapping[str, str]) -> dict[str, Any]:
    mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "").upper()
    username = props.get("sasl.username")
    password = props.get("sasl.password")
    jaas_text = props.get("sasl.jaas.config")
    if jaas_text:
        jaas = parse_jaas_config(jaas_text)
        if jaas.login_module == PLAIN_LOGIN_MODULE:
            mechanism = mechanism or "PLAIN"
            if mechanism != "PLAIN":
                raise SecurityConfigError(
                    f"sasl.jaas.config uses PlainLoginModule but sasl.mechanism is {mechanism}",
                    hint=f"use {SCRAM_LOGIN_MODULE} for SCRAM")
        elif jaas.login_module == SCRAM_LOGIN_MODULE:
            if not mechanism.startswith("SCRAM-"):
                raise SecurityConfigError(
                    "sasl.jaas.config uses ScramLoginModule: set sasl.mechanism to "
                    f"SCRAM-SHA-256 or SCRAM-SHA-512 (got {mechanism or 'none'})")
        else:
            raise SecurityConfigError(
                f"sasl.jaas.config: login module {jaas.login_module} is not supported",
                hint=f"use {PLAIN_LOGIN_MODULE} or {SCRAM_LOGIN_MODULE}")
        username = jaas.options.get("username", username)
        password = jaas.options.get("password", password)
    if not mechanism:
        raise SecurityConfigError("security.protocol SASL_* needs sasl.mechanism",
                                  hint=f"one of {', '.join(SASL_MECHANISMS)}")
    if mechanism not in SASL_MECHANISMS:
        raise SecurityConfigError(
            f"sasl.mechanism {mechanism} is not supported",
            hint=f"one of {', '.join(SASL_MECHANISMS)}")
    if not username or password is None:
        raise SecurityConfigError(
            f"SASL {mechanism} needs a user name and password",
            hint="set sasl.username and sasl.password, or sasl.jaas.config")
    return {"sasl_mechanism": mechanism, "sasl_username": username,
            "sasl_password": password}


def _tls(props: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    try:
        truststore_type = keystores.normalize_type(props.get("ssl.truststore.type"),
                                                   setting="ssl.truststore.location")
        keystore_type = keystores.normalize_type(props.get("ssl.keystore.type"),
                                                 setting="ssl.keystore.location")
    except InvalidConfigError as exc:
        raise SecurityConfigError(exc.message) from None
    trust_location = props.get("ssl.ca.location") or props.get("ssl.truststore.location")
    values["ca_location"] = trust_location or None
    if props.get("ssl.truststore.location") and not props.get("ssl.ca.location"):
        values["truststore_type"] = truststore_type
        values["truststore_password"] = props.get("ssl.truststore.password") or None
    else:
        values["truststore_type"] = keystores.PEM if trust_location else None
    values["ca_pem"] = props.get("ssl.ca.pem") or props.get("ssl.truststore.certificates") \
        or None
    keystore = props.get("ssl.keystore.location")
    chain_pem = props.get("ssl.certificate.pem") or props.get("ssl.keystore.certificate.chain")
    key_pem = props.get("ssl.key.pem") or props.get("ssl.keystore.key")
    values["certificate_location"] = props.get("ssl.certificate.location") or None
    values["key_location"] = props.get("ssl.key.location") or None
    values["certificate_pem"] = chain_pem or None
    values["key_pem"] = key_pem or None
    values["key_password"] = props.get("ssl.key.password") or None
    if keystore:
        if keystore_type == keystores.PEM:
            values["certificate_location"] = values["certificate_location"] or keystore
            values["key_location"] = values["key_location"] or keystore
        else:
            values["keystore_location"] = keystore
            values["keystore_password"] = props.get("ssl.keystore.password")
            values["keystore_type"] = keystore_type
    if (values["certificate_location"] is None) != (values["key_location"] is None):
        raise SecurityConfigError(
            "a client certificate needs both ssl.certificate.location and ssl.key.location "
            "(or ssl.keystore.location with ssl.keystore.type=PEM)")
    if (values["certificate_pem"] is None) != (values["key_pem"] is None):
        raise SecurityConfigError(
            "an inline client certificate needs both ssl.keystore.certificate.chain and "
            "ssl.keystore.key (librdkafka: ssl.certificate.pem and ssl.key.pem)")
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").lower()
    if algorithm not in ("https", "", "none"):
        raise SecurityConfigError(
            f"ssl.endpoint.identification.algorithm must be https or empty, got {algorithm!r}")
    values["verify_hostname"] = algorithm == "https"
    return values


_JAAS_ENTRY = re.compile(r"\s*([A-Za-z_$][\w.$]*)\s+(required|requisite|sufficient|optional)\b",
                         re.IGNORECASE)
_JAAS_OPTION = re.compile(r'\s*([\w.\-]+)\s*=\s*("((?:[^"\\]|\\.)*)"|[^\s;"]+)')


def parse_jaas_config(text: str) -> JaasConfig:
    """The login module, control flag and options of a ``sasl.jaas.config`` value (Kafka's
    ``JaasConfig`` grammar: ``Module flag key="value" key2=value2;``; exactly one entry)."""
    match = _JAAS_ENTRY.match(text)
    if match is None:
        raise SecurityConfigError(
            "sasl.jaas.config must look like 'LoginModuleClass required username=\"u\" "
            "password=\"p\";'")
    options: dict[str, str] = {}
    position = match.end()
    while True:
        option = _JAAS_OPTION.match(text, position)
        if option is None:
            break
        quoted = option.group(3)
        options[option.group(1)] = (re.sub(r"\\(.)", r"\1", quoted) if quoted is not None
                                    else option.group(2))
        position = option.end()
    rest = text[position:].strip()
    if rest != ";":
        raise SecurityConfigError(
            f"sasl.jaas.config: expected 'key=\"value\"' options and one closing ';' after the "
            f"login module, got {rest[:40]!r}")
    return JaasConfig(match.group(1), match.group(2).lower(), options)


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """The keys and values of a Java ``.properties`` file: ``key=value``, ``key: value`` or
    ``key value``; ``#``/``!`` comment lines; a trailing backslash continues the line; the
    escapes ``\\t \\n \\r \\f \\uXXXX`` and ``\\<char>``. Raises :class:`SecurityConfigError`
    when the file cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SecurityConfigError(f"cannot read the client properties file {path}: {exc}",
                                  hint="check the --command-config path") from None
    return parse_properties(text)


def _load_pem_chain(context: ssl.SSLContext, config: SecurityConfig) -> None:
    if config.certificate_location is not None:
        context.load_cert_chain(config.certificate_location, config.key_location,
                                password=config.key_password)
        return
    assert config.certificate_pem is not None and config.key_pem is not None
    with tempfile.TemporaryDirectory(prefix="loglake-tls-") as folder:
        path = Path(folder) / "client.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(config.key_pem.strip() + "\n" + config.certificate_pem.strip() + "\n")
        context.load_cert_chain(str(path), password=config.key_password)


def coerce(security: SecurityConfig | Mapping[str, str] | None) -> SecurityConfig:
    """``security`` as given to the SDK: a :class:`SecurityConfig`, a mapping of client
    properties (Java or librdkafka names), or ``None`` (PLAINTEXT)."""
    if security is None:
        return SecurityConfig()
    if isinstance(security, SecurityConfig):
        return security
    return SecurityConfig.from_properties(security)


# -- command line ----------------------------------------------------------------------------


def add_command_config_option(parser: argparse.ArgumentParser) -> None:
    """``--command-config FILE`` (as Kafka's tools): client properties for the connection."""
    parser.add_argument(
        "--command-config", default=None, metavar="FILE",
        help="client properties file (security.protocol, sasl.*, ssl.*, as for Kafka's tools; "
        f"default: ${COMMAND_CONFIG_ENV}, else the one `loglake dev up --security` printed "
        "when the brokers also come from that cluster)")


def command_config_path(flag: str | None, *, bootstrap_from_profile: bool,
                        environ: Mapping[str, str] | None = None) -> str | None:
    """The properties file a command uses: the flag, else ``$LOGLAKE_COMMAND_CONFIG``, else
    the dev profile's when the brokers came from the profile too (a flag or variable naming
    other brokers never picks up the dev cluster's credentials)."""
    from loglake import addresses

    env = os.environ if environ is None else environ
    if flag:
        return flag
    if env.get(COMMAND_CONFIG_ENV, "").strip():
        return env[COMMAND_CONFIG_ENV].strip()
    if bootstrap_from_profile:
        profile = addresses.read_profile(env)
        if profile is not None and profile.command_config:
            return profile.command_config
    return None


def from_args(args: argparse.Namespace,
              environ: Mapping[str, str] | None = None) -> SecurityConfig:
    """The security of a CLI command with ``--bootstrap-server`` and ``--command-config``."""
    from loglake import addresses

    flag = getattr(args, "bootstrap_server", None)
    from_profile = addresses.resolve("bootstrap", flag, environ).source == "profile"
    path = command_config_path(getattr(args, "command_config", None),
                               bootstrap_from_profile=from_profile, environ=environ)
    return SecurityConfig() if path is None else SecurityConfig.load(path)


def from_spark_options(kafka: Mapping[str, str]) -> SecurityConfig:
    """The security of ``format("loglake")``'s ``kafka.*`` options, given WITHOUT the prefix
    (``security.protocol``, ``sasl.jaas.config``, ``ssl.truststore.location``, ...); the
    untranslated options are in :attr:`SecurityConfig.other`."""
    return SecurityConfig.from_properties(kafka)
