"""Storage conformance: the same Delta/pyarrow/fsspec checks on a local directory and on S3 (moto).

Reads go through ``to_pyarrow_dataset(filesystem=storage.pyarrow_filesystem(table_uri))``: the
default (deltalake's Python filesystem handler) makes the process abort at exit now and then.
"""

from __future__ import annotations

import json
import pickle
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction

from loglake.segments.storage import Storage, parse_storage_options
from tests.s3_server import S3Server

SCHEMA = pa.schema([
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("value", pa.binary()),
])


def rows(partition: int, offsets: range) -> pa.Table:
    return pa.table({
        "partition": pa.array([partition] * len(offsets), pa.int32()),
        "offset": pa.array(list(offsets), pa.int64()),
        "value": pa.array([f"v{o}".encode() for o in offsets], pa.binary()),
    }, schema=SCHEMA)


@pytest.fixture(params=["local", "s3"])
def storage(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Storage:
    if request.param == "local":
        return Storage.from_url(str(tmp_path_factory.mktemp("lake")))
    server: S3Server = request.getfixturevalue("s3_server")
    return server.storage(f"lake-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def table_uri(storage: Storage) -> str:
    uri = storage.table_uri(f"t-{uuid.uuid4().hex[:8]}")
    DeltaTable.create(uri, schema=SCHEMA, partition_by=["partition"],
                      storage_options=storage.delta_options())
    return uri


def load(storage: Storage, uri: str) -> DeltaTable:
    return DeltaTable(uri, storage_options=storage.delta_options())


def read(storage: Storage, uri: str, partition: int | None = None) -> pa.Table:
    dataset = load(storage, uri).to_pyarrow_dataset(
        filesystem=storage.pyarrow_filesystem(uri))
    flt = None if partition is None else ds.field("partition") == partition
    return dataset.to_table(filter=flt).sort_by([("partition", "ascending"),
                                                  ("offset", "ascending")])


def txn(app_id: str, version: int) -> CommitProperties:
    return CommitProperties(app_transactions=[Transaction(app_id, version)])


# -- Delta through deltalake ----------------------------------------------------------------


def test_create_append_read(storage: Storage, table_uri: str) -> None:
    write_deltalake(table_uri, rows(0, range(0, 3)), mode="append",
                    storage_options=storage.delta_options())
    write_deltalake(table_uri, rows(1, range(0, 2)), mode="append",
                    storage_options=storage.delta_options())
    table = load(storage, table_uri)
    assert table.version() == 2
    assert table.metadata().partition_columns == ["partition"]
    assert read(storage, table_uri).num_rows == 5
    assert read(storage, table_uri, partition=1)["offset"].to_pylist() == [0, 1]


def test_same_app_transaction_from_stale_snapshot_fails(storage: Storage, table_uri: str) -> None:
    first, second = load(storage, table_uri), load(storage, table_uri)
    assert first.version() == second.version() == 0
    write_deltalake(first, rows(0, range(0, 10)), mode="append",
                    commit_properties=txn("t-0", 9))
    with pytest.raises(CommitFailedError):
        write_deltalake(second, rows(0, range(0, 10)), mode="append",
                        commit_properties=txn("t-0", 9))
    table = load(storage, table_uri)
    assert table.version() == 1
    assert table.transaction_version("t-0") == 9
    assert table.transaction_version("t-1") is None
    assert read(storage, table_uri).num_rows == 10


def test_racing_commits_same_app_transaction_exactly_one_wins(
    storage: Storage, table_uri: str
) -> None:
    writers = 6
    tables = [load(storage, table_uri) for _ in range(writers)]
    outcomes = race(writers, lambda i: write_deltalake(
        tables[i], rows(0, range(0, 5)), mode="append", commit_properties=txn("t-0", 4)))
    assert sorted(outcomes) == ["CommitFailedError"] * (writers - 1) + ["ok"]
    table = load(storage, table_uri)
    assert table.version() == 1
    assert read(storage, table_uri).num_rows == 5


def test_racing_blind_appends_all_land(storage: Storage, table_uri: str) -> None:
    """Put-if-absent on the commit file: no commit overwrites another, losers rebase."""
    writers = 6
    tables = [load(storage, table_uri) for _ in range(writers)]
    outcomes = race(writers, lambda i: write_deltalake(
        tables[i], rows(i, range(0, 3)), mode="append", commit_properties=txn(f"t-{i}", 2)))
    assert outcomes == ["ok"] * writers
    table = load(storage, table_uri)
    assert table.version() == writers
    assert {table.transaction_version(f"t-{i}") for i in range(writers)} == {2}
    assert read(storage, table_uri).num_rows == 3 * writers


def race(writers: int, work: Callable[[int], object]) -> list[str]:
    barrier = threading.Barrier(writers)
    outcomes = [""] * writers

    def run(i: int) -> None:
        barrier.wait()
        try:
            work(i)
            outcomes[i] = "ok"
        except Exception as exc:
            outcomes[i] = type(exc).__name__

    threads = [threading.Thread(target=run, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return outcomes


# -- pyarrow-written files committed with create_write_transaction ----------------------------


def test_pyarrow_file_committed_with_add_action(storage: Storage, table_uri: str) -> None:
    data = rows(3, range(100, 104))
    relative = f"partition=3/tier-{uuid.uuid4().hex}.parquet"
    file_uri = f"{table_uri}/{relative}"
    storage.make_parent_dirs(file_uri)
    fs = storage.pyarrow_filesystem()
    pq.write_table(data.drop_columns(["partition"]), storage.path_in_fs(file_uri), filesystem=fs)
    size = fs.get_file_info(storage.path_in_fs(file_uri)).size
    assert size > 0
    stats = {
        "numRecords": data.num_rows,
        "minValues": {"offset": 100}, "maxValues": {"offset": 103},
        "nullCount": {"offset": 0, "value": 0},
    }
    add = AddAction(path=relative, size=size, partition_values={"partition": "3"},
                    modification_time=int(time.time() * 1000), data_change=True,
                    stats=json.dumps(stats))
    table = load(storage, table_uri)
    table.create_write_transaction([add], mode="append", schema=SCHEMA,
                                   partition_by=["partition"],
                                   commit_properties=txn("t-3", 103))
    write_deltalake(table_uri, rows(4, range(0, 2)), mode="append",
                    storage_options=storage.delta_options())

    table = load(storage, table_uri)
    assert table.transaction_version("t-3") == 103
    got = read(storage, table_uri, partition=3)
    assert got["offset"].to_pylist() == [100, 101, 102, 103]
    assert got["partition"].to_pylist() == [3] * 4
    assert got["value"].to_pylist() == data["value"].to_pylist()
    assert read(storage, table_uri, partition=4).num_rows == 2
    uris = table.file_uris()
    assert any(u.endswith(relative) for u in uris)
    for uri in uris:
        assert storage.path_in_fs(uri).startswith(storage.path_in_fs(table_uri) + "/")


# -- arbitrary files through fsspec ---------------------------------------------------------


def test_fsspec_list_read_write(storage: Storage, table_uri: str) -> None:
    write_deltalake(table_uri, rows(0, range(0, 2)), mode="append",
                    storage_options=storage.delta_options())
    fs = storage.filesystem()
    log_dir = storage.path_in_fs(f"{table_uri}/_delta_log")
    commits = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(log_dir, detail=False)
                     if p.endswith(".json"))
    assert commits == [f"{v:020d}.json" for v in (0, 1)]
    first = json.loads(fs.cat_file(f"{log_dir}/{commits[0]}").splitlines()[0])
    assert "protocol" in first or "commitInfo" in first or "metaData" in first

    note = storage.path_in_fs(f"{storage.url}/checkpoints/nested/state.json")
    with fs.open(note, "wb") as handle:
        handle.write(b'{"ok": true}')
    assert fs.cat_file(note) == b'{"ok": true}'
    found = fs.find(storage.path_in_fs(f"{storage.url}/checkpoints"))
    assert found == [note]
    # The same file is visible through pyarrow.
    with storage.pyarrow_filesystem().open_input_stream(note) as stream:
        assert stream.read() == b'{"ok": true}'
    fs.rm(note)
    assert not fs.exists(note)


# -- Storage API (no I/O) -------------------------------------------------------------------


def test_local_url_normalisation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(str(tmp_path))
    rel = Storage.from_url("lake/")
    assert rel.is_local and rel.url == f"{tmp_path}/lake"
    assert Storage.from_url(f"file://{tmp_path}/lake/") == rel
    assert rel.table_uri("orders") == f"{tmp_path}/lake/topics/orders"
    assert rel.path_in_fs(f"file://{tmp_path}/lake/topics/x/a.parquet") == (
        f"{tmp_path}/lake/topics/x/a.parquet")
    assert rel.delta_options() == {}
    with pytest.raises(ValueError):
        rel.path_in_fs(f"{tmp_path}/elsewhere/a.parquet")
    with pytest.raises(ValueError):
        rel.table_uri("a/b")


def test_s3_options_from_explicit_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "env-token")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://minio.invalid:9000")
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ALLOW_HTTP", raising=False)

    from_env = Storage.from_url("s3a://bucket/some/prefix/")
    assert from_env.url == "s3://bucket/some/prefix"
    assert not from_env.is_local
    assert dict(from_env.options) == {
        "aws_access_key_id": "env-key", "aws_secret_access_key": "env-secret",
        "aws_session_token": "env-token", "aws_region": "eu-west-1",
        "aws_endpoint_url": "http://minio.invalid:9000", "aws_allow_http": "true",
    }
    assert from_env.delta_options()["aws_conditional_put"] == "etag"
    assert "env-secret" not in repr(from_env) and "env-token" not in repr(from_env)
    assert from_env.table_uri("t") == "s3://bucket/some/prefix/topics/t"
    assert from_env.path_in_fs("s3://bucket/some/prefix/topics/t/x.parquet") == (
        "bucket/some/prefix/topics/t/x.parquet")
    with pytest.raises(ValueError):
        from_env.path_in_fs("s3://other/some/prefix/x")

    explicit = Storage.from_url("s3://bucket", parse_storage_options([
        "AWS_ACCESS_KEY_ID=k", "aws_secret_access_key=s=x", "endpoint_url=https://s3.example",
        "conditional_put=etag",
    ]))
    assert dict(explicit.options) == {
        "aws_access_key_id": "k", "aws_secret_access_key": "s=x",  # no env token mixed in
        "aws_endpoint_url": "https://s3.example", "aws_region": "eu-west-1",
        "aws_conditional_put": "etag",
    }
    pa_kwargs = explicit._pyarrow_s3_kwargs()
    assert pa_kwargs["endpoint_override"] == "s3.example" and pa_kwargs["scheme"] == "https"
    fs_kwargs = explicit._s3fs_kwargs()
    assert fs_kwargs["key"] == "k" and fs_kwargs["endpoint_url"] == "https://s3.example"
    assert fs_kwargs["client_kwargs"] == {"region_name": "eu-west-1"}

    assert pickle.loads(pickle.dumps(explicit)) == explicit
    assert hash(pickle.loads(pickle.dumps(explicit))) == hash(explicit)


def test_parse_storage_options_rejects_bad_pairs() -> None:
    assert parse_storage_options(["a=1", " b =2=3", "a=4"]) == {"a": "4", "b": "2=3"}
    for bad in (["novalue"], ["=x"]):
        with pytest.raises(ValueError):
            parse_storage_options(bad)


def test_s3_server_env_reaches_a_fresh_storage(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    storage = Storage.from_url(s3_server.url(f"env-{uuid.uuid4().hex[:8]}"))
    assert storage.options["aws_endpoint_url"] == s3_server.endpoint_url
    uri = storage.table_uri("t")
    write_deltalake(uri, rows(0, range(0, 2)), partition_by=["partition"],
                    storage_options=storage.delta_options())
    assert read(storage, uri).num_rows == 2
