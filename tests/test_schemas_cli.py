"""``loglake schemas list|versions|get|register|check|delete|config`` against a real
``loglake registry`` process (``DevCluster(registry=True)``): in-process through
``loglake.cli.main`` for outputs and exit statuses, and once as the real command for the
one-line error; a secured cluster's registry (HTTPS + basic auth) through
``--command-config``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from loglake.cli import main
from loglake.client.schemas_cli import EXIT_INCOMPATIBLE
from loglake.dev.harness import DevCluster

CLICK_V1 = json.dumps({"type": "record", "name": "Click", "namespace": "test.cli", "fields": [
    {"name": "user_id", "type": "long"}]})
CLICK_V2 = json.dumps({"type": "record", "name": "Click", "namespace": "test.cli", "fields": [
    {"name": "user_id", "type": "long"},
    {"name": "page", "type": ["null", "string"], "default": None}]})
CLICK_BREAKING = json.dumps({"type": "record", "name": "Click", "namespace": "test.cli",
                             "fields": [{"name": "user_id", "type": "string"}]})
COMMON_PROTO = 'syntax = "proto3";\npackage test.cli;\nmessage Money { int64 cents = 1; }\n'
ORDER_PROTO = ('syntax = "proto3";\npackage test.cli;\nimport "common.proto";\n'
               'message Order { string id = 1; test.cli.Money total = 2; }\n')


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str) -> Iterator[DevCluster]:
    data = tmp_path_factory.mktemp("schemas-cli")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts, registry=True) as cluster:
        yield cluster


@pytest.fixture
def subject() -> str:
    return f"cli-{uuid.uuid4().hex[:8]}-value"


def run(capsys: pytest.CaptureFixture[str], dev: DevCluster, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(["schemas", *argv, "--registry", dev.registry_url])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_register_list_get_versions(dev: DevCluster, subject: str, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    v1 = write(tmp_path, "click.avsc", CLICK_V1)
    status, out, _ = run(capsys, dev, "register", subject, v1)
    assert status == 0
    first = int(out)
    assert run(capsys, dev, "register", subject, v1)[1] == out  # same schema, same id
    second = int(run(capsys, dev, "register", subject, write(tmp_path, "v2.avsc", CLICK_V2))[1])
    assert second != first
    assert subject in run(capsys, dev, "list")[1].split()
    assert run(capsys, dev, "list", "--prefix", subject[:12])[1].split() == [subject]
    assert run(capsys, dev, "versions", subject)[1].split() == ["1", "2"]
    status, out, _ = run(capsys, dev, "get", subject, "--version", "1")
    assert status == 0 and json.loads(out) == json.loads(CLICK_V1)
    assert json.loads(run(capsys, dev, "get", subject)[1]) == json.loads(CLICK_V2)
    assert json.loads(run(capsys, dev, "get", "--id", str(first))[1]) == json.loads(CLICK_V1)
    document = json.loads(run(capsys, dev, "get", subject, "--format", "json")[1])
    assert (document["subject"], document["version"], document["id"],
            document["schemaType"]) == (subject, 2, second, "AVRO")


def test_check_compatible_and_incompatible(dev: DevCluster, subject: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, dev, "register", subject, write(tmp_path, "v1.avsc", CLICK_V1))[0] == 0
    status, out, _ = run(capsys, dev, "check", subject, write(tmp_path, "v2.avsc", CLICK_V2))
    assert (status, out.strip()) == (0, "compatible")
    breaking = write(tmp_path, "bad.avsc", CLICK_BREAKING)
    status, out, err = run(capsys, dev, "check", subject, breaking, "--all-versions")
    assert (status, out.strip()) == (EXIT_INCOMPATIBLE, "incompatible")
    assert "not compatible with writer type: long" in err  # the registry's reasons
    status, _, err = run(capsys, dev, "register", subject, breaking)
    assert status == 1 and "409" in err and err.count("\n") == 1


def test_config_levels(dev: DevCluster, subject: str, tmp_path: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, dev, "register", subject, write(tmp_path, "v1.avsc", CLICK_V1))[0] == 0
    assert run(capsys, dev, "config")[1].strip() == "BACKWARD"
    assert run(capsys, dev, "config", subject, "--set", "none")[1].strip() == "NONE"
    assert run(capsys, dev, "config", subject)[1].strip() == "NONE"
    breaking = write(tmp_path, "bad.avsc", CLICK_BREAKING)
    assert run(capsys, dev, "check", subject, breaking)[0] == 0  # NONE: anything goes
    assert run(capsys, dev, "config", subject, "--delete")[0] == 0
    assert run(capsys, dev, "check", subject, breaking)[0] == EXIT_INCOMPATIBLE
    with pytest.raises(SystemExit) as usage:
        run(capsys, dev, "config", "--set", "SIDEWAYS")
    assert usage.value.code == 2


def test_json_from_stdin_protobuf_with_a_reference(dev: DevCluster, subject: str,
                                                   tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO('{"type": "object"}'))
    status, out, _ = run(capsys, dev, "register", f"{subject}-json", "-", "--type", "json")
    assert status == 0
    document = json.loads(run(capsys, dev, "get", f"{subject}-json", "--format", "json")[1])
    assert document["schemaType"] == "JSON" and document["id"] == int(out)
    common = f"{subject}-common"
    assert run(capsys, dev, "register", common, write(tmp_path, "common.proto", COMMON_PROTO)
               )[0] == 0
    status, out, err = run(capsys, dev, "register", f"{subject}-order",
                           write(tmp_path, "order.proto", ORDER_PROTO),
                           "--reference", f"common.proto={common}:1")
    assert status == 0, err
    document = json.loads(run(capsys, dev, "get", f"{subject}-order", "--format", "json")[1])
    assert document["schemaType"] == "PROTOBUF"
    assert document["references"] == [{"name": "common.proto", "subject": common,
                                       "version": 1}]
    # without the reference the import does not resolve: 42201, one line
    status, _, err = run(capsys, dev, "register", f"{subject}-order2",
                         write(tmp_path, "order2.proto", ORDER_PROTO))
    assert status == 1 and "42201" in err and err.count("\n") == 1


def test_delete_soft_then_permanent(dev: DevCluster, subject: str, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, dev, "register", subject, write(tmp_path, "v1.avsc", CLICK_V1))
    run(capsys, dev, "register", subject, write(tmp_path, "v2.avsc", CLICK_V2))
    assert run(capsys, dev, "delete", subject, "--version", "1")[1].split() == ["1"]
    assert run(capsys, dev, "versions", subject)[1].split() == ["2"]
    assert run(capsys, dev, "versions", subject, "--deleted")[1].split() == ["1", "2"]
    status, _, err = run(capsys, dev, "delete", subject, "--permanent")
    assert status == 1 and "40405" in err  # hard delete needs a soft delete first
    assert run(capsys, dev, "delete", subject)[1].split() == ["2"]
    assert run(capsys, dev, "delete", subject, "--permanent")[1].split() == ["1", "2"]
    status, _, err = run(capsys, dev, "get", subject)
    assert status == 1 and "40401" in err and err.startswith("loglake: error: ")


def test_real_command_errors_are_one_line(dev: DevCluster, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("LOGLAKE_SCHEMA_REGISTRY_URL", "LOGLAKE_COMMAND_CONFIG")}
    env["LOGLAKE_CONFIG_DIR"] = str(tmp_path / "no-profile")
    missing = subprocess.run([sys.executable, "-m", "loglake", "schemas", "list"],
                             capture_output=True, text=True, env=env, timeout=60)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.startswith("loglake: error: no schema registry URL given")
    assert missing.stderr.count("\n") == 1
    env["LOGLAKE_SCHEMA_REGISTRY_URL"] = dev.registry_url
    unknown = subprocess.run([sys.executable, "-m", "loglake", "schemas", "get",
                              f"nope-{uuid.uuid4().hex[:6]}"],
                             capture_output=True, text=True, env=env, timeout=60)
    assert unknown.returncode == 1 and "40401" in unknown.stderr
    assert unknown.stderr.count("\n") == 1 and "Traceback" not in unknown.stderr
    down = subprocess.run([sys.executable, "-m", "loglake", "schemas", "list",
                           "--registry", "http://127.0.0.1:9"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert down.returncode == 1 and down.stderr.count("\n") == 1
    assert "listing subjects" in down.stderr


def test_secured_registry_through_command_config(
        tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOGLAKE_SCHEMA_REGISTRY_URL", raising=False)
    data = tmp_path_factory.mktemp("schemas-cli-secure")
    with DevCluster(data / "dev", brokers=1, zookeeper=zookeeper_hosts, registry=True,
                    security="sasl_ssl") as secure:
        conf = secure.registry_config()
        assert conf["url"].startswith("https://")
        properties = tmp_path / "registry.properties"
        properties.write_text(f"schema.registry.url={conf['url']}\n"
                              f"basic.auth.user.info={conf['basic.auth.user.info']}\n"
                              f"schema.registry.ssl.ca.location={conf['ssl.ca.location']}\n")
        schema = write(tmp_path, "v1.avsc", CLICK_V1)
        capsys.readouterr()
        assert main(["schemas", "register", "secure-value", schema,
                     "--command-config", str(properties)]) == 0
        assert capsys.readouterr().out.strip().isdigit()
        wrong = tmp_path / "wrong.properties"
        wrong.write_text(properties.read_text().replace(
            conf["basic.auth.user.info"], "admin:not-the-password"))
        assert main(["schemas", "list", "--command-config", str(wrong)]) == 1
        assert "401" in capsys.readouterr().err
