"""TLS contexts from Kafka's ``ssl.*`` settings, PEM only.

* Keystore (``ssl.keystore.location``, ``ssl.keystore.type=PEM``): one PEM file holding the
  private key (optionally encrypted with ``ssl.key.password``) and the certificate chain, leaf
  first -- what Kafka's PEM keystore holds. JKS and PKCS12 are not read (convert with openssl).
* Truststore (``ssl.truststore.location``): a PEM bundle of CA certificates. Without one, the
  system's default CAs are trusted.
* Versions: ``ssl.enabled.protocols`` (TLSv1.2 and/or TLSv1.3); TLS 1.0 and 1.1 are never
  negotiated, whatever the settings say (config.py refuses them too).
* ``ssl.client.auth``: none (no certificate asked), requested (asked; verified against the
  truststore when sent; a connection without one is ANONYMOUS), required (a handshake without a
  trusted, valid certificate fails: the connection closes before any Kafka request).

Contexts are built once per listener at start (reading the files: call it before serving, or
from a worker thread) and shared by every connection of that listener; an ``ssl.SSLContext``
is safe to share across connections. Handshakes run inside asyncio's transport, never blocking
the loop. A missing or unreadable file raises InvalidConfigError naming the setting and the
listener.
"""

from __future__ import annotations

import ssl

from loglake.config import BrokerConfig
from loglake.errors import InvalidConfigError

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
CLIENT_AUTH_MODES = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                     "required": ssl.CERT_REQUIRED}


def _set_versions(context: ssl.SSLContext, config: BrokerConfig) -> None:
    versions = sorted(_VERSIONS[name] for name in config.ssl_enabled_protocols)
    context.minimum_version = versions[0]
    context.maximum_version = versions[-1]


def _load_keystore(context: ssl.SSLContext, config: BrokerConfig, where: str) -> None:
    location = config.ssl_keystore_location
    if location is None:
        return
    try:
        context.load_cert_chain(location, password=config.ssl_key_password)
    except FileNotFoundError:
        raise InvalidConfigError(
            f"ssl.keystore.location {location} ({where}) does not exist") from None
    except (ssl.SSLError, OSError) as exc:
        raise InvalidConfigError(
            f"ssl.keystore.location {location} ({where}) is not a PEM file with a private key "
            f"and its certificate chain (or ssl.key.password is wrong): {exc}") from None


def _load_truststore(context: ssl.SSLContext, config: BrokerConfig, where: str,
                     purpose: ssl.Purpose) -> None:
    location = config.ssl_truststore_location
    if location is None:
        context.load_default_certs(purpose)
        return
    try:
        context.load_verify_locations(cafile=location)
    except FileNotFoundError:
        raise InvalidConfigError(
            f"ssl.truststore.location {location} ({where}) does not exist") from None
    except (ssl.SSLError, OSError) as exc:
        raise InvalidConfigError(
            f"ssl.truststore.location {location} ({where}) is not a PEM bundle of CA "
            f"certificates: {exc}") from None


def server_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The TLS server context of ``listener`` (its ``listener.name.<l>.ssl.*`` settings over
    the broker-wide ones)."""
    config = config.for_listener(listener)
    where = f"listener {listener}"
    if config.ssl_keystore_location is None:
        raise InvalidConfigError(
            f"{where} uses TLS but ssl.keystore.location is not set (broker-wide or as "
            f"listener.name.{listener.lower()}.ssl.keystore.location)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_versions(context, config)
    _load_keystore(context, config, where)
    context.verify_mode = CLIENT_AUTH_MODES[config.ssl_client_auth]
    if context.verify_mode != ssl.CERT_NONE:
        _load_truststore(context, config, where, ssl.Purpose.CLIENT_AUTH)
    return context


def client_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The TLS client context a broker uses to reach other brokers' ``listener``: verifies
    their certificates against the truststore (host names too unless
    ``ssl.endpoint.identification.algorithm`` is empty) and presents the keystore's
    certificate (for listeners with ``ssl.client.auth=required``)."""
    config = config.for_listener(listener)
    where = f"inter-broker listener {listener}"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _set_versions(context, config)
    context.check_hostname = config.ssl_endpoint_identification_algorithm == "https"
    context.verify_mode = ssl.CERT_REQUIRED
    _load_truststore(context, config, where, ssl.Purpose.SERVER_AUTH)
    _load_keystore(context, config, where)
    return context
