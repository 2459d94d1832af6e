"""SCRAM credentials in Kafka's stored form (pure: no ZooKeeper, no broker)."""

from __future__ import annotations

import base64

import pytest
import scramp

from loglake.broker.security.scram_credentials import (
    SCRAM_MECHANISMS,
    CredentialFormatError,
    credential_from_salted_password,
    credentials_of,
    make_credential,
    parse_credential,
    salted_password,
)


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_stored_credential_lets_a_scram_client_in(mechanism: str) -> None:
    text = make_credential(mechanism, "s3cret", 4096)
    credential = parse_credential(text)
    assert credential.iterations == 4096
    assert "s3cret" not in text
    server = scramp.ScramMechanism(mechanism).make_server(
        lambda _user: credential.scramp_auth_info())
    client = scramp.ScramClient([mechanism], "alice", "s3cret")
    server.set_client_first(client.get_client_first())
    client.set_server_first(server.get_server_first())
    server.set_client_final(client.get_client_final())
    client.set_server_final(server.get_server_final())  # raises if the server's proof is bad


@pytest.mark.parametrize("mechanism", SCRAM_MECHANISMS)
def test_wrong_password_is_refused(mechanism: str) -> None:
    credential = parse_credential(make_credential(mechanism, "right"))
    server = scramp.ScramMechanism(mechanism).make_server(
        lambda _user: credential.scramp_auth_info())
    client = scramp.ScramClient([mechanism], "alice", "wrong")
    server.set_client_first(client.get_client_first())
    client.set_server_first(server.get_server_first())
    with pytest.raises(scramp.ScramException):
        server.set_client_final(client.get_client_final())


def test_kafka_string_form() -> None:
    salt = b"0123456789abcdef"
    text = make_credential("SCRAM-SHA-256", "pw", 4096, salt=salt)
    keys = [part.split("=", 1)[0] for part in text.split(",")]
    assert keys == ["salt", "stored_key", "server_key", "iterations"]
    assert text.startswith(f"salt={base64.b64encode(salt).decode()},")
    assert text.endswith(",iterations=4096")
    assert parse_credential(text).to_string() == text
    # the same as deriving from the salted password (what AlterUserScramCredentials carries)
    salted = salted_password("SCRAM-SHA-256", "pw", salt, 4096)
    assert credential_from_salted_password("SCRAM-SHA-256", salt, salted, 4096).to_string() == text


def test_bounds_and_bad_input() -> None:
    with pytest.raises(ValueError):
        make_credential("SCRAM-SHA-256", "pw", 4095)
    with pytest.raises(ValueError):
        make_credential("SCRAM-SHA-256", "pw", 16385)
    with pytest.raises(ValueError):
        make_credential("PLAIN", "pw")
    with pytest.raises(ValueError):
        make_credential("SCRAM-SHA-512", "")
    with pytest.raises(CredentialFormatError):
        parse_credential("salt=AA==,stored_key=AA==")
    with pytest.raises(CredentialFormatError):
        parse_credential("salt=!!,stored_key=AA==,server_key=AA==,iterations=4096")


def test_credentials_of_a_user_config_skips_other_keys() -> None:
    text = make_credential("SCRAM-SHA-512", "pw")
    found = credentials_of({"SCRAM-SHA-512": text, "producer_byte_rate": "1024",
                            "SCRAM-SHA-256": "garbage"})
    assert list(found) == ["SCRAM-SHA-512"]
