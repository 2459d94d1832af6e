"""Object-storage location of the cold tier: one root URL plus the options to reach it.

A :class:`Storage` names where the per-topic Delta tables live (``<url>/topics/<topic>``) and
hands out correctly configured clients for it: ``storage_options`` for deltalake (delta-rs), an
fsspec filesystem and a pyarrow filesystem. All three see the same endpoint, region and
credentials, taken from one canonical option set.

Invariants:

* ``url`` is normalised: a local root is an absolute path without a ``file://`` prefix; a remote
  root is ``scheme://bucket[/prefix]`` (``s3a://`` and ``s3n://`` become ``s3://``). There is
  never a trailing slash.
* For ``s3://`` roots, ``options`` uses delta-rs option names in lower case (``aws_endpoint_url``,
  ``aws_access_key_id``, ``aws_secret_access_key``, ``aws_session_token``, ``aws_region``,
  ``aws_allow_http``, ...). Explicit options win over the AWS environment variables, which are
  read once, in :meth:`Storage.from_url`. Credentials are taken as a group: if the caller gives
  ``aws_access_key_id``, no credential variable comes from the environment (so a stray
  ``AWS_SESSION_TOKEN`` cannot be paired with someone else's keys).
* Delta commits on S3 are made with a conditional put (``PUT`` with ``If-None-Match: *``), so two
  writers can never both create the same ``_delta_log/<version>.json``; the loser re-reads the log
  and either rebases (blind appends) or fails with ``CommitFailedError`` (e.g. the same app
  transaction id). delta-rs 1.x does this by default for S3 (its DynamoDB locking provider is
  gone); :meth:`Storage.delta_options` still sets
  ``aws_conditional_put=etag`` explicitly so the guarantee does not hang on a library default.
  Unsafe renames are never enabled here; an explicit ``aws_s3_allow_unsafe_rename`` option is
  passed through untouched.
* Storage objects are immutable, hashable and picklable (Spark ships them to Python workers);
  secrets are redacted from ``repr``.

Thread-safety: a Storage may be shared freely between threads. :meth:`Storage.filesystem` returns
fsspec's cached instance for the same arguments (s3fs instances are safe for concurrent calls and
are re-created after fork); :meth:`Storage.pyarrow_filesystem` builds a new pyarrow filesystem per
call, and pyarrow filesystems are thread-safe.

Known pitfall (deltalake 1.6 + pyarrow): ``DeltaTable.to_pyarrow_dataset()`` /
``to_pyarrow_table()`` without ``filesystem=`` read through deltalake's Python filesystem handler,
and the process then aborts at exit now and then ("terminate called without an active
exception", delta-rs#2184). Pass ``filesystem=storage.pyarrow_filesystem(table_uri)`` (a native
pyarrow filesystem rooted at the table) instead.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import fsspec
    import pyarrow.fs

TOPICS_DIR = "topics"
"""Directory under the storage root that holds one Delta table per topic."""

CONDITIONAL_PUT_KEY = "aws_conditional_put"
CONDITIONAL_PUT_MODE = "etag"
"""delta-rs / object_store conditional-put mode for S3: ``PUT`` with ``If-None-Match: *`` to
create a commit file only if absent (``If-Match: <etag>`` for updates)."""

_S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})

_S3_ALIASES: Mapping[str, str] = {
    "endpoint": "aws_endpoint_url",
    "endpoint_url": "aws_endpoint_url",
    "aws_endpoint": "aws_endpoint_url",
    "aws_endpoint_url_s3": "aws_endpoint_url",
    "access_key_id": "aws_access_key_id",
    "secret_access_key": "aws_secret_access_key",
    "session_token": "aws_session_token",
    "token": "aws_session_token",
    "region": "aws_region",
    "aws_default_region": "aws_region",
    "allow_http": "aws_allow_http",
    "conditional_put": "aws_conditional_put",
    "skip_signature": "aws_skip_signature",
    "virtual_hosted_style_request": "aws_virtual_hosted_style_request",
    "allow_invalid_certificates": "aws_allow_invalid_certificates",
}
"""Other spellings accepted for S3 options (after lower-casing), mapped to the canonical key."""

_CREDENTIAL_KEYS = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")

_ENV_CREDENTIALS: Mapping[str, tuple[str, ...]] = {
    "aws_access_key_id": ("AWS_ACCESS_KEY_ID",),
    "aws_secret_access_key": ("AWS_SECRET_ACCESS_KEY",),
    "aws_session_token": ("AWS_SESSION_TOKEN",),
}
_ENV_SETTINGS: Mapping[str, tuple[str, ...]] = {
    "aws_region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
    "aws_endpoint_url": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
    "aws_allow_http": ("AWS_ALLOW_HTTP",),
}
"""Environment variables per canonical option, first non-empty one wins."""

_SECRET_MARKERS = ("secret", "token", "password", "account_key", "sas", "credential")


def parse_storage_options(pairs: Iterable[str]) -> dict[str, str]:
    """``["key=value", ...]`` (CLI ``--storage-option`` style) to a dict; later keys win.

    Keys are stripped of surrounding blanks; values are kept verbatim (they may contain ``=``).
    Raises ValueError for an item without ``=`` or with an empty key.
    """
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"storage option must be key=value, got {pair!r}")
        options[key] = value
    return options


def _is_secret(key: str) -> bool:
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in {"1", "true", "yes", "on"}


class _Options(Mapping[str, str]):
    """Immutable, hashable, picklable str→str mapping whose repr hides secrets."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, str] | None = None) -> None:
        self._data: dict[str, str] = dict(data or {})

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(frozenset(self._data.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._data) == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        shown = {k: ("***" if _is_secret(k) else v) for k, v in self._data.items()}
        return repr(shown)

    def __getstate__(self) -> dict[str, str]:
        return self._data

    def __setstate__(self, state: dict[str, str]) -> None:
        self._data = dict(state)


def _canonical_s3_options(options: Mapping[str, str]) -> dict[str, str]:
    canonical: dict[str, str] = {}
    for key, value in options.items():
        lowered = key.strip().lower()
        canonical[_S3_ALIASES.get(lowered, lowered)] = str(value)
    return canonical


def _from_environment(options: dict[str, str], environ: Mapping[str, str]) -> None:
    """Fill missing S3 options from AWS_* variables (credentials only as a group)."""
    if not any(key in options for key in _CREDENTIAL_KEYS):
        for key, names in _ENV_CREDENTIALS.items():
            for name in names:
                if environ.get(name):
                    options[key] = environ[name]
                    break
    for key, names in _ENV_SETTINGS.items():
        if key in options:
            continue
        for name in names:
            if environ.get(name):
                options[key] = environ[name]
                break


def _normalise_local(path: str) -> str:
    absolute = os.path.abspath(os.path.expanduser(path))
    return absolute if absolute == "/" else absolute.rstrip("/")


def _local_path_of(uri: str) -> str:
    """A ``file://`` URL or a path, as an absolute local path (no percent-decoding)."""
    if uri.startswith("file:"):
        parts = urlsplit(uri)
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"file URL with a remote host is not local: {uri!r}")
        return _normalise_local(parts.path or "/")
    return _normalise_local(uri)


@dataclass(frozen=True)
class Storage:
    """Where Delta tables live: an fsspec-style URL (a local path or file:// URL by default;
    s3://bucket/prefix and other schemes by URL).

    Build with :meth:`from_url`; the constructor takes ``url`` and ``options`` as they are.
    """

    url: str
    """Normalised root: absolute local path, or ``scheme://bucket[/prefix]``; no trailing slash."""
    options: Mapping[str, str] = field(default_factory=_Options)
    """Object-store options (delta-rs names for S3: endpoint, credentials, region, allow_http)."""

    def __post_init__(self) -> None:
        if not isinstance(self.options, _Options):
            object.__setattr__(self, "options", _Options(self.options))

    @classmethod
    def from_url(cls, url: str, options: Mapping[str, str] | None = None) -> Storage:
        """Normalise ``url`` and resolve its options.

        Local paths (relative, ``~``, or ``file://``) become absolute paths. For ``s3://`` (also
        ``s3a://``, ``s3n://``) option keys are canonicalised to delta-rs names and completed
        from the AWS environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
        AWS_REGION / AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, AWS_ALLOW_HTTP);
        an ``http://`` endpoint implies ``aws_allow_http=true`` unless set otherwise, since
        delta-rs refuses plain HTTP without it. Other schemes keep ``options`` verbatim.
        """
        raw = url.strip()
        if not raw:
            raise ValueError("storage URL is empty")
        given = dict(options or {})
        if "://" not in raw and not raw.startswith("file:"):
            return cls(_normalise_local(raw), _Options(given))
        scheme = raw.split(":", 1)[0].lower()
        if scheme == "file":
            return cls(_local_path_of(raw), _Options(given))
        parts = urlsplit(raw)
        if not parts.netloc:
            raise ValueError(f"storage URL needs a bucket or host: {url!r}")
        if parts.query or parts.fragment:
            raise ValueError(f"storage URL must not have a query or fragment: {url!r}")
        path = posixpath.normpath(parts.path) if parts.path.strip("/") else ""
        path = path.rstrip("/")
        if scheme in _S3_SCHEMES:
            scheme = "s3"
            resolved = _canonical_s3_options(given)
            _from_environment(resolved, os.environ)
            endpoint = resolved.get("aws_endpoint_url", "")
            if endpoint.lower().startswith("http://") and "aws_allow_http" not in resolved:
                resolved["aws_allow_http"] = "true"
            given = resolved
        return cls(f"{scheme}://{parts.netloc}{path}", _Options(given))

    @property
    def scheme(self) -> str:
        """``file`` for local roots, otherwise the URL scheme (``s3``, ``gs``, ...)."""
        return "file" if "://" not in self.url else self.url.split("://", 1)[0]

    @property
    def is_local(self) -> bool:
        """True if the root is a local directory."""
        return self.scheme == "file"

    def table_uri(self, topic: str) -> str:
        """URI of ``topic``'s Delta table: ``<url>/topics/<topic>``."""
        if not topic or "/" in topic or topic in (".", ".."):
            raise ValueError(f"not a valid topic name for a table location: {topic!r}")
        root = "" if self.url == "/" else self.url
        return f"{root}/{TOPICS_DIR}/{topic}"

    def delta_options(self) -> dict[str, str]:
        """``storage_options`` for deltalake (``DeltaTable``, ``write_deltalake``, ``create``).

        For S3 this adds ``aws_conditional_put=etag`` unless the caller chose a mode: commits
        must be put-if-absent for concurrent writers (tierer, compaction, a new leader) to be
        safe; see the module docstring.
        """
        options = dict(self.options)
        if self.scheme == "s3":
            options.setdefault(CONDITIONAL_PUT_KEY, CONDITIONAL_PUT_MODE)
        return options

    def filesystem(self) -> fsspec.AbstractFileSystem:
        """fsspec filesystem for arbitrary files under :attr:`url`; address files with
        :meth:`path_in_fs`.

        Local: ``LocalFileSystem(auto_mkdir=True)`` (writes create parent directories, as on
        object stores). S3: s3fs with the same endpoint/credentials/region and the listings
        cache off (other processes write under the same prefixes). Other schemes: fsspec's
        implementation for the scheme with ``options`` passed as keyword arguments.
        """
        import fsspec

        if self.is_local:
            return fsspec.filesystem("file", auto_mkdir=True)
        if self.scheme == "s3":
            return fsspec.filesystem("s3", **self._s3fs_kwargs())
        return fsspec.filesystem(self.scheme, **dict(self.options))

    def pyarrow_filesystem(self, root: str | None = None) -> pyarrow.fs.FileSystem:
        """pyarrow filesystem for pyarrow.parquet / pyarrow.dataset readers and writers.

        Without ``root``, paths are those of :meth:`path_in_fs`. With ``root`` (a URI under
        this storage, e.g. a table URI) it is a ``SubTreeFileSystem`` rooted there, so paths are
        relative to it, which is what ``DeltaTable.to_pyarrow_dataset(filesystem=...)`` expects.

        Local: ``LocalFileSystem`` (it does not create parent directories; see
        :meth:`make_parent_dirs`). S3: native ``S3FileSystem`` with the same endpoint,
        credentials and region. Other schemes: the fsspec filesystem wrapped in a
        ``PyFileSystem``.
        """
        import pyarrow.fs as pafs

        base: pafs.FileSystem
        if self.is_local:
            base = pafs.LocalFileSystem()
        elif self.scheme == "s3":
            base = pafs.S3FileSystem(**self._pyarrow_s3_kwargs())
        else:
            base = pafs.PyFileSystem(pafs.FSSpecHandler(self.filesystem()))
        if root is None:
            return base
        return pafs.SubTreeFileSystem(self.path_in_fs(root), base)

    def path_in_fs(self, uri: str) -> str:
        """The path of ``uri`` (a full URI under this storage; for local roots also an absolute
        path) for :meth:`filesystem` and :meth:`pyarrow_filesystem`.

        Local: the absolute path. S3 and other object stores: ``bucket/key`` without scheme.
        The URI is taken literally (no percent-decoding). Raises ValueError for a URI outside
        :attr:`url`.
        """
        if self.is_local:
            if "://" in uri and not uri.startswith("file:"):
                raise ValueError(f"{uri!r} is not under local storage {self.url!r}")
            path = _local_path_of(uri)
            if self.url != "/" and path != self.url and not path.startswith(self.url + "/"):
                raise ValueError(f"{uri!r} is not under storage {self.url!r}")
            return path
        scheme, sep, rest = uri.partition("://")
        scheme = scheme.lower()
        if self.scheme == "s3" and scheme in _S3_SCHEMES:
            scheme = "s3"
        root = self.url.split("://", 1)[1]
        rest = rest.rstrip("/")
        if not sep or scheme != self.scheme or not (rest == root or rest.startswith(root + "/")):
            raise ValueError(f"{uri!r} is not under storage {self.url!r}")
        return rest

    def make_parent_dirs(self, uri: str) -> None:
        """Create the parent directories of ``uri`` on local storage (pyarrow's LocalFileSystem
        will not); a no-op on object stores, where pyarrow's ``create_dir`` would only leave
        empty marker objects behind."""
        if self.is_local:
            os.makedirs(os.path.dirname(self.path_in_fs(uri)), exist_ok=True)

    def __repr__(self) -> str:
        return f"Storage(url={self.url!r}, options={self.options!r})"

    # -- S3 option translation ------------------------------------------------------------

    def _s3fs_kwargs(self) -> dict[str, Any]:
        opts = self.options
        kwargs: dict[str, Any] = {"use_listings_cache": False}
        client_kwargs: dict[str, Any] = {}
        if "aws_access_key_id" in opts:
            kwargs["key"] = opts["aws_access_key_id"]
        if "aws_secret_access_key" in opts:
            kwargs["secret"] = opts["aws_secret_access_key"]
        if "aws_session_token" in opts:
            kwargs["token"] = opts["aws_session_token"]
        if "aws_endpoint_url" in opts:
            kwargs["endpoint_url"] = opts["aws_endpoint_url"]
        if "aws_region" in opts:
            client_kwargs["region_name"] = opts["aws_region"]
        if _truthy(opts.get("aws_skip_signature")):
            kwargs["anon"] = True
        if _truthy(opts.get("aws_allow_invalid_certificates")):
            client_kwargs["verify"] = False
        if _truthy(opts.get("aws_virtual_hosted_style_request")):
            kwargs["config_kwargs"] = {"s3": {"addressing_style": "virtual"}}
        if client_kwargs:
            kwargs["client_kwargs"] = client_kwargs
        return kwargs

    def _pyarrow_s3_kwargs(self) -> dict[str, Any]:
        opts = self.options
        kwargs: dict[str, Any] = {}
        if "aws_access_key_id" in opts:
            kwargs["access_key"] = opts["aws_access_key_id"]
        if "aws_secret_access_key" in opts:
            kwargs["secret_key"] = opts["aws_secret_access_key"]
        if "aws_session_token" in opts:
            kwargs["session_token"] = opts["aws_session_token"]
        if "aws_region" in opts:
            kwargs["region"] = opts["aws_region"]
        endpoint = opts.get("aws_endpoint_url")
        if endpoint:
            parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
            kwargs["scheme"] = parts.scheme
            kwargs["endpoint_override"] = parts.netloc + parts.path.rstrip("/")
        if _truthy(opts.get("aws_skip_signature")):
            kwargs["anonymous"] = True
        if _truthy(opts.get("aws_virtual_hosted_style_request")):
            kwargs["force_virtual_addressing"] = True
        return kwargs
