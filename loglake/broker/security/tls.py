"""TLS contexts from Kafka's ``ssl.*`` settings: PEM, PKCS12 and JKS stores, or inline PEM.

* Keystore: ``ssl.keystore.location`` with ``ssl.keystore.type`` PEM (one file holding the
  private key, optionally encrypted with ``ssl.key.password``, and the certificate chain, leaf
  first: loaded by ``ssl`` itself, as before), PKCS12 or JKS (``ssl.keystore.password``, and
  ``ssl.key.password`` for a JKS key entry: read by :mod:`loglake.keystores` into PEM); type
  not set: decided by the file's content. Or Kafka's inline PEM (KIP-651):
  ``ssl.keystore.key`` + ``ssl.keystore.certificate.chain`` (type PEM or not set; not together
  with a location).
* Truststore (``ssl.truststore.location``, ``ssl.truststore.type``, ``ssl.truststore.password``):
  CA certificates in a PEM bundle, a PKCS12 or a JKS store; or inline
  ``ssl.truststore.certificates``. Without any, the system's default CAs are trusted.
* Versions: ``ssl.enabled.protocols`` (TLSv1.2 and/or TLSv1.3); TLS 1.0 and 1.1 are never
  negotiated, whatever the settings say (config.py refuses them too).
* ``ssl.client.auth``: none (no certificate asked), requested (asked; verified against the
  truststore when sent; a connection without one is ANONYMOUS), required (a handshake without a
  trusted, valid certificate fails: the connection closes before any Kafka request).

Every setting may be given per listener (``listener.name.<l>.ssl.*``, applied by
``BrokerConfig.for_listener``). Contexts are built once per listener at start (reading the
files: call it before serving, or from a worker thread) and shared by every connection of that
listener; an ``ssl.SSLContext`` is safe to share across connections. Handshakes run inside
asyncio's transport, never blocking the loop. A missing or unreadable file, a wrong password, a
store without a key (keystore) or certificates (truststore) raises InvalidConfigError: one line
naming the setting and the listener, never a password.
"""

from __future__ import annotations

import ssl

from loglake import keystores
from loglake.config import BrokerConfig
from loglake.errors import InvalidConfigError

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
CLIENT_AUTH_MODES = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                     "required": ssl.CERT_REQUIRED}


def _set_versions(context: ssl.SSLContext, config: BrokerConfig) -> None:
    versions = sorted(_VERSIONS[name] for name in config.ssl_enabled_protocols)
    context.minimum_version = versions[0]
    context.maximum_version = versions[-1]


def has_keystore(config: BrokerConfig) -> bool:
    """Whether a keystore is configured (a location or the inline PEM key/chain)."""
    return bool(config.ssl_keystore_location or config.ssl_keystore_key
                or config.ssl_keystore_certificate_chain)


def _inline_keystore(context: ssl.SSLContext, config: BrokerConfig, where: str) -> None:
    if config.ssl_keystore_location is not None:
        raise InvalidConfigError(
            f"ssl.keystore.location and ssl.keystore.key ({where}): set one of them, not both")
    if not config.ssl_keystore_key or not config.ssl_keystore_certificate_chain:
        raise InvalidConfigError(
            f"ssl.keystore.key ({where}): the inline PEM keystore needs both ssl.keystore.key "
            f"and ssl.keystore.certificate.chain")
    if config.ssl_keystore_type not in (None, keystores.PEM):
        raise InvalidConfigError(
            f"ssl.keystore.type ({where}): ssl.keystore.key is PEM, but the type is "
            f"{config.ssl_keystore_type}")
    keystores.load_into(context, keystores.keystore_from_pem(
        config.ssl_keystore_key, config.ssl_keystore_certificate_chain, config.ssl_key_password,
        where=where))


def _load_keystore(context: ssl.SSLContext, config: BrokerConfig, where: str) -> None:
    if config.ssl_keystore_key or config.ssl_keystore_certificate_chain:
        _inline_keystore(context, config, where)
        return
    location = config.ssl_keystore_location
    if location is None:
        return
    kind = keystores.store_type_of(location, config.ssl_keystore_type,
                                   setting="ssl.keystore.location", where=where)
    if kind != keystores.PEM:
        keystores.load_into(context, keystores.read_keystore(
            location, kind, config.ssl_keystore_password, config.ssl_key_password,
            where=where))
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
    if config.ssl_truststore_certificates:
        if location is not None:
            raise InvalidConfigError(
                f"ssl.truststore.location and ssl.truststore.certificates ({where}): set one "
                f"of them, not both")
        if config.ssl_truststore_type not in (None, keystores.PEM):
            raise InvalidConfigError(
                f"ssl.truststore.type ({where}): ssl.truststore.certificates is PEM, but the "
                f"type is {config.ssl_truststore_type}")
        context.load_verify_locations(cadata=keystores.truststore_from_pem(
            config.ssl_truststore_certificates, where=where).decode())
        return
    if location is None:
        context.load_default_certs(purpose)
        return
    kind = keystores.store_type_of(location, config.ssl_truststore_type,
                                   setting="ssl.truststore.location", where=where)
    if kind != keystores.PEM:
        context.load_verify_locations(cadata=keystores.read_truststore(
            location, kind, config.ssl_truststore_password, where=where).decode())
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
    if not has_keystore(config):
        raise InvalidConfigError(
            f"{where} uses TLS but ssl.keystore.location is not set (broker-wide or as "
            f"listener.name.{listener.lower()}.ssl.keystore.location; or ssl.keystore.key "
            f"with ssl.keystore.certificate.chain)")
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
