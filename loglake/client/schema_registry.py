"""Reaching a schema registry from the SDK and the CLI: the ONE translation from client
properties to confluent-kafka's :class:`~confluent_kafka.schema_registry.SchemaRegistryClient`
configuration, and registry errors as loglake errors.

Settings come from Confluent's client property names (the Java serializers' and
confluent-kafka's), in a mapping or a ``--command-config`` properties file:

=========================================  =====================================================
``schema.registry.url``                    the registry's base URL (``http://`` or ``https://``;
                                           ``url`` too: confluent-kafka's client settings)
``basic.auth.user.info``                   ``user:password`` for HTTP Basic auth (also
(``schema.registry.basic.auth.user.info``)  accepted with the ``schema.registry.`` prefix);
                                           ``basic.auth.credentials.source`` may be
                                           ``USER_INFO`` (the default) or ``URL`` (credentials
                                           in the URL's ``user:password@``)
``schema.registry.ssl.ca.location``        PEM CA file for an ``https`` registry (Java's
(``...ssl.truststore.location``, PEM)       name too); default: the
                                           Kafka client's ``ssl.ca.location`` /
                                           ``ssl.truststore.location`` (the dev cluster uses
                                           one CA for brokers and registry), else the system's
``schema.registry.ssl.certificate.``       client certificate and key (mutual TLS)
``location``, ``...ssl.key.location``
=========================================  =====================================================

The URL is taken from, in order: the explicit argument (``--registry``), the environment
variable ``LOGLAKE_SCHEMA_REGISTRY_URL``, the properties' ``schema.registry.url``; none of them:
:class:`SchemaRegistryConfigError` saying how to give one.

:class:`RegistrySettings` is frozen and picklable; its ``repr`` leaves the password out. No I/O
except reading a properties file; thread-safe.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from loglake.errors import LoglakeError

REGISTRY_URL_ENV = "LOGLAKE_SCHEMA_REGISTRY_URL"
"""Environment variable naming the registry URL (used when no ``--registry`` is given)."""

_USER_INFO_KEYS = ("basic.auth.user.info", "schema.registry.basic.auth.user.info")
_CA_KEYS = ("schema.registry.ssl.ca.location", "schema.registry.ssl.truststore.location",
            "ssl.ca.location", "ssl.truststore.location")


class SchemaRegistryConfigError(LoglakeError):
    """The registry cannot be reached with the given settings (no URL, bad user info)."""

    code = ErrorCode.invalid_config


class SchemaRegistryRequestError(LoglakeError):
    """The registry refused a request or could not be reached. ``status`` is the HTTP status
    (0: no answer), ``error_code`` Confluent's code (e.g. 40401 subject not found, 409
    incompatible, 42201 invalid schema; -1 when there is none)."""

    code = ErrorCode.invalid_request

    def __init__(self, message: str, *, status: int, error_code: int) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code


@dataclass(frozen=True)
class RegistrySettings:
    """Where the registry is and how to authenticate to it."""

    url: str
    user_info: str | None = field(default=None, repr=False)
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], *, url: str | None = None,
                        environ: Mapping[str, str] | None = None) -> RegistrySettings:
        """The settings of client ``properties`` (see the module), the URL from ``url``, else
        ``$LOGLAKE_SCHEMA_REGISTRY_URL``, else ``schema.registry.url``."""
        env = os.environ if environ is None else environ
        props = {str(k).strip(): str(v).strip() for k, v in properties.items() if v is not None}
        chosen = (url or "").strip() or env.get(REGISTRY_URL_ENV, "").strip() \
            or props.get("schema.registry.url", "") or props.get("url", "")
        if not chosen:
            raise SchemaRegistryConfigError(
                "no schema registry URL given",
                hint=f"pass --registry URL, set ${REGISTRY_URL_ENV}, or put "
                "schema.registry.url in the --command-config file")
        if not chosen.startswith(("http://", "https://")):
            raise SchemaRegistryConfigError(
                f"schema registry URL {chosen!r} must start with http:// or https://")
        source = props.get("basic.auth.credentials.source", "USER_INFO").upper()
        if source not in ("USER_INFO", "URL", "SASL_INHERIT"):
            raise SchemaRegistryConfigError(
                f"basic.auth.credentials.source={source} is not supported "
                "(USER_INFO, URL or SASL_INHERIT)")
        user_info = next((props[k] for k in _USER_INFO_KEYS if props.get(k)), None)
        if source == "SASL_INHERIT" and props.get("sasl.username"):
            user_info = f"{props['sasl.username']}:{props.get('sasl.password', '')}"
        if user_info is not None and ":" not in user_info:
            raise SchemaRegistryConfigError(
                "basic.auth.user.info must be USER:PASSWORD")
        ca = next((props[k] for k in _CA_KEYS if props.get(k)), None)
        return cls(url=chosen.rstrip("/"), user_info=user_info, ca_location=ca,
                   certificate_location=props.get("schema.registry.ssl.certificate.location")
                   or None,
                   key_location=props.get("schema.registry.ssl.key.location") or None)

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None, *, url: str | None = None,
             environ: Mapping[str, str] | None = None) -> RegistrySettings:
        """:meth:`from_properties` of a properties file (``None``: no file)."""
        from loglake.client.security import read_properties

        properties = {} if path is None else read_properties(path)
        return cls.from_properties(properties, url=url, environ=environ)

    def client_conf(self) -> dict[str, Any]:
        """confluent-kafka's ``SchemaRegistryClient`` configuration."""
        conf: dict[str, Any] = {"url": self.url}
        if self.user_info is not None:
            conf["basic.auth.user.info"] = self.user_info
        if self.ca_location is not None and self.url.startswith("https://"):
            conf["ssl.ca.location"] = self.ca_location
        if self.certificate_location is not None:
            conf["ssl.certificate.location"] = self.certificate_location
        if self.key_location is not None:
            conf["ssl.key.location"] = self.key_location
        return conf


def coerce(registry: RegistrySettings | Mapping[str, str] | str) -> RegistrySettings:
    """Settings from settings, client properties, or a bare URL."""
    if isinstance(registry, RegistrySettings):
        return registry
    if isinstance(registry, str):
        return RegistrySettings.from_properties({}, url=registry, environ={})
    return RegistrySettings.from_properties(registry, environ={})


def client(registry: RegistrySettings | Mapping[str, str] | str) -> Any:
    """A confluent-kafka ``SchemaRegistryClient`` for ``registry`` (settings, properties or
    a URL)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient(coerce(registry).client_conf())


def request_error(exc: BaseException, what: str) -> SchemaRegistryRequestError:
    """``exc`` (confluent-kafka's ``SchemaRegistryError``, or a transport error) as one line
    saying what was being done."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    if isinstance(exc, SchemaRegistryError):
        status = int(getattr(exc, "http_status_code", 0) or 0)
        code = int(getattr(exc, "error_code", -1) or -1)
        lines = str(getattr(exc, "error_message", "") or exc).strip().splitlines()
        text = lines[0] if lines else "no message"
        return SchemaRegistryRequestError(f"{what}: {text} (error {code}, HTTP {status})",
                                          status=status, error_code=code)
    other = str(exc).strip().splitlines()
    return SchemaRegistryRequestError(
        f"{what}: {type(exc).__name__}: {other[0] if other else 'no message'}",
        status=0, error_code=-1)
