"""Secured dev cluster files (loglake/dev/secure.py, loglake/dev/certs.py), in-process: the
certificates verify for loopback, are kept across runs and renewed when no longer good; the
admin password and client properties files are private, kept, and parse to the admin's
settings in both forms; the broker settings name them."""

from __future__ import annotations

import datetime as dt
import ssl
from pathlib import Path

from loglake.client.security import SecurityConfig
from loglake.dev import certs, secure


def test_certificates_verify_for_loopback_and_are_kept(tmp_path: Path) -> None:
    first = certs.ensure_dev_certificates(tmp_path)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(first.broker)
    client = ssl.create_default_context(cafile=str(first.ca))
    client.load_cert_chain(first.client)
    for path in (first.ca_key, first.broker, first.client):
        assert path.stat().st_mode & 0o077 == 0, path
    before = {p: p.read_bytes() for p in (first.ca, first.broker, first.client)}
    again = certs.ensure_dev_certificates(tmp_path)
    assert {p: p.read_bytes() for p in (again.ca, again.broker, again.client)} == before

    # a broker certificate close to its end (or not from this CA) is issued anew
    ca = certs.make_ca()
    certs.write_private(first.broker, certs.issue(
        ca, "localhost", now=dt.datetime.now(dt.UTC) - dt.timedelta(days=2),
        days=2).keystore_pem())
    renewed = certs.ensure_dev_certificates(tmp_path)
    assert renewed.broker.read_bytes() != before[first.broker]
    assert renewed.ca.read_bytes() == before[first.ca]


def test_client_properties_and_broker_settings(tmp_path: Path) -> None:
    setup = secure.prepare(tmp_path)
    assert setup.client_properties.stat().st_mode & 0o077 == 0
    assert setup.java_client_properties.stat().st_mode & 0o077 == 0
    librdkafka_form = SecurityConfig.load(setup.client_properties)
    java_form = SecurityConfig.load(setup.java_client_properties)
    for config in (librdkafka_form, java_form):
        assert config.protocol == "SASL_SSL"
        assert config.sasl_mechanism == "SCRAM-SHA-512"
        assert (config.sasl_username, config.sasl_password) == ("admin", setup.admin_password)
        assert config.librdkafka()["ssl.ca.location"] == str(setup.ca)
    assert "sasl.jaas.config" in setup.java_client_properties.read_text()
    assert secure.prepare(tmp_path).admin_password == setup.admin_password  # kept

    overrides = secure.broker_overrides(setup)
    assert overrides["listeners"] == "SASL_SSL://127.0.0.1:{port}"
    assert overrides["super.users"] == "User:admin"
    jaas = overrides["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]
    assert f'password="{setup.admin_password}"' in jaas
