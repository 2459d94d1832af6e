"""Where the cluster is: one resolution of the ZooKeeper and broker addresses for every command.

Each address is taken from the first of (per address, independently):

1. the command-line flag: ``--zookeeper HOST:PORT[,HOST:PORT][/CHROOT]`` or
   ``--bootstrap-server HOST:PORT[,HOST:PORT]``;
2. the environment: ``LOGLAKE_ZOOKEEPER``, ``LOGLAKE_BOOTSTRAP_SERVERS``;
3. the profile ``loglake dev up`` wrote (like kubectl's current context);
4. nowhere: :class:`AddressError`, one line saying how to give it. There is deliberately no
   built-in default (Kafka's ``127.0.0.1:2181`` / ``:9092`` would be whatever cluster happens
   to listen there, or none).

Profile: ``<config dir>/current`` where the config dir is ``$LOGLAKE_CONFIG_DIR``, else
``$XDG_CONFIG_HOME/loglake``, else ``~/.config/loglake``. One JSON object::

    {"format": 1, "zookeeper": "127.0.0.1:10092/loglake", "bootstrap_servers": "127.0.0.1:9092",
     "data_dir": "/abs/path/of/the/dev/cluster"}

plus ``"command_config": "<path>"`` for a secured dev cluster (``dev up --security sasl_ssl``):
the client properties file commands use when their brokers come from the profile
(:func:`loglake.client.security.command_config_path`), and ``"zookeeper_jaas_file": "<path>"``
when its ZooKeeper authenticates: the JAAS ``Client`` login of tools reaching that ZooKeeper
(:func:`loglake.catalog.zk_auth.zk_auth_for_connect`).

``dev up`` replaces it atomically (temp file, fsync, rename), so a reader sees the old or the
new profile, never a torn one; ``dev down`` removes it only while it still names that cluster's
``data_dir``. An unreadable profile is an error naming the file, not silently skipped.

Pure functions over an environment mapping (``os.environ`` by default) and the file system; safe
from any thread.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kio.schema.errors import ErrorCode

from loglake.errors import LoglakeError

ZOOKEEPER_ENV = "LOGLAKE_ZOOKEEPER"
BOOTSTRAP_ENV = "LOGLAKE_BOOTSTRAP_SERVERS"
CONFIG_DIR_ENV = "LOGLAKE_CONFIG_DIR"
PROFILE_FILE = "current"
PROFILE_FORMAT = 1

Kind = Literal["zookeeper", "bootstrap"]
Source = Literal["flag", "environment", "profile"]

_FLAGS: dict[Kind, str] = {"zookeeper": "--zookeeper", "bootstrap": "--bootstrap-server"}
_ENV: dict[Kind, str] = {"zookeeper": ZOOKEEPER_ENV, "bootstrap": BOOTSTRAP_ENV}
_FORMS: dict[Kind, str] = {"zookeeper": "HOST:PORT/CHROOT", "bootstrap": "HOST:PORT"}
_WHAT: dict[Kind, str] = {"zookeeper": "ZooKeeper", "bootstrap": "broker"}


class AddressError(LoglakeError):
    """No address was given anywhere, or the profile cannot be read."""

    code = ErrorCode.invalid_request


@dataclass(frozen=True)
class Profile:
    """The cluster ``loglake dev up`` last started."""

    zookeeper: str
    bootstrap_servers: str
    data_dir: str
    command_config: str | None = None
    """The client properties file of a secured dev cluster (``dev up --security``): commands
    whose brokers come from this profile connect with it."""
    zookeeper_jaas_file: str | None = None
    """The JAAS file (``Client`` section) a dev cluster with ZooKeeper authentication records:
    tools connecting to its ZooKeeper log in with it (:mod:`loglake.catalog.zk_auth`)."""

    def to_json(self) -> str:
        document = {"format": PROFILE_FORMAT, "zookeeper": self.zookeeper,
                    "bootstrap_servers": self.bootstrap_servers, "data_dir": self.data_dir}
        if self.command_config is not None:
            document["command_config"] = self.command_config
        if self.zookeeper_jaas_file is not None:
            document["zookeeper_jaas_file"] = self.zookeeper_jaas_file
        return json.dumps(document, indent=2) + "\n"


@dataclass(frozen=True)
class Resolved:
    """An address and where it came from (``origin``: the flag, variable or file name)."""

    address: str
    source: Source
    origin: str


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$LOGLAKE_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/loglake``, else ``~/.config/loglake``."""
    env = os.environ if environ is None else environ
    if env.get(CONFIG_DIR_ENV):
        return Path(env[CONFIG_DIR_ENV])
    if env.get("XDG_CONFIG_HOME"):
        return Path(env["XDG_CONFIG_HOME"]) / "loglake"
    home = env.get("HOME")
    return (Path(home) if home else Path.home()) / ".config" / "loglake"


def profile_path(environ: Mapping[str, str] | None = None) -> Path:
    return config_dir(environ) / PROFILE_FILE


def read_profile(environ: Mapping[str, str] | None = None) -> Profile | None:
    """The current profile; None if there is none. Raises AddressError if it is unreadable."""
    path = profile_path(environ)
    try:
        data = json.loads(path.read_text())
        if data.get("format") != PROFILE_FORMAT:
            raise ValueError(f"unknown format {data.get('format')!r}")
        command_config = data.get("command_config")
        jaas_file = data.get("zookeeper_jaas_file")
        return Profile(str(data["zookeeper"]), str(data["bootstrap_servers"]),
                       str(data["data_dir"]),
                       None if command_config is None else str(command_config),
                       None if jaas_file is None else str(jaas_file))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise AddressError(f"cannot read the loglake profile {path}: {exc}",
                           hint="delete it, or run `loglake dev up` again to rewrite it") from None


def write_profile(profile: Profile, environ: Mapping[str, str] | None = None) -> Path:
    """Make ``profile`` the current one (atomic replace); returns the file's path."""
    path = profile_path(environ)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as file:
        file.write(profile.to_json())
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)
    return path


def clear_profile(data_dir: str | Path, environ: Mapping[str, str] | None = None) -> bool:
    """Remove the profile if it names the dev cluster in ``data_dir``; whether it did."""
    try:
        profile = read_profile(environ)
    except AddressError:
        return False  # not ours to judge; leave it for the user
    if profile is None or Path(profile.data_dir) != Path(data_dir).absolute():
        return False
    profile_path(environ).unlink(missing_ok=True)
    return True


def resolve(kind: Kind, flag: str | None,
            environ: Mapping[str, str] | None = None) -> Resolved:
    """The ``kind`` address by the precedence in the module docstring."""
    env = os.environ if environ is None else environ
    if flag:
        return Resolved(flag, "flag", _FLAGS[kind])
    from_env = env.get(_ENV[kind], "").strip()
    if from_env:
        return Resolved(from_env, "environment", _ENV[kind])
    profile = read_profile(env)
    if profile is not None:
        value = profile.zookeeper if kind == "zookeeper" else profile.bootstrap_servers
        return Resolved(value, "profile", str(profile_path(env)))
    raise AddressError(
        f"no {_WHAT[kind]} address: pass {_FLAGS[kind]} {_FORMS[kind]}, set {_ENV[kind]}, or "
        f"start a dev cluster with `loglake dev up` (it records its addresses in "
        f"{profile_path(env)})")


def zookeeper(flag: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The ZooKeeper connect string (with the cluster's chroot) a command should use."""
    return resolve("zookeeper", flag, environ).address


def bootstrap_servers(flag: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The brokers a command should contact."""
    return resolve("bootstrap", flag, environ).address


def add_zookeeper_option(parser: argparse.ArgumentParser) -> None:
    """``--zookeeper`` with no built-in default (resolve it with :func:`zookeeper`)."""
    parser.add_argument("--zookeeper", default=None, metavar="HOST:PORT[/CHROOT]",
                        help=f"the cluster's ZooKeeper, with the brokers' chroot (default: "
                        f"${ZOOKEEPER_ENV}, else the cluster of the last `loglake dev up`)")


def add_bootstrap_option(parser: argparse.ArgumentParser) -> None:
    """``--bootstrap-server`` with no built-in default (resolve it with
    :func:`bootstrap_servers`)."""
    parser.add_argument("--bootstrap-server", default=None, metavar="HOST:PORT",
                        help=f"brokers to connect to, comma-separated for several (default: "
                        f"${BOOTSTRAP_ENV}, else the cluster of the last `loglake dev up`)")
