"""Failed-login limits of the console's login (``loglake console --basic-auth``) and the
authenticator's unknown-user cache (:mod:`loglake.basic_auth`).

In process: :class:`~loglake.basic_auth.LoginLimiter` with an injected clock (the window, the
attempts in flight, the memory bound) and :class:`~loglake.basic_auth.ScramAuthenticator`
over a real ZooKeeper (an unknown name costs one ZooKeeper read per negative-cache lifetime; a
user created later logs in once it passes).

Real HTTP against a real console process (``--max-login-failures 3``) on a ZooKeeper holding
only the SCRAM users (no broker is needed to log in): after 3 failures from one address the 4th
attempt gets 429 with ``Retry-After`` and even a right password that was not accepted recently
is refused unchecked, while a login accepted before (alice's open session) still passes and
another loopback address is unaffected; failures for one name spread over several addresses
lock that name (``--max-login-failures-per-user``); ``/healthz`` stays open.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest
from kazoo.client import KazooClient

from loglake.basic_auth import LoginLimiter, LoginLimits, ScramAuthenticator
from loglake.broker.security.scram_credentials import store_user_credential
from loglake.catalog.entity_configs import EntityConfigStore
from loglake.dev.harness import wait_until
from tests.browser_util import ConsoleProcess
from tests.zk_util import fresh_chroot, kazoo_client

pytestmark = pytest.mark.timeout(180)

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret",
             "dave": "dave-secret"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ---- the limiter (in process) ----------------------------------------------------------------

def test_failures_per_address_within_the_window() -> None:
    clock = Clock()
    limiter = LoginLimiter(LoginLimits(per_address=3, per_user=100, window_s=60), clock=clock)
    for i in range(3):
        assert limiter.acquire("10.0.0.1", f"u{i}") is None
        limiter.release("10.0.0.1", f"u{i}", failed=True)
        clock.now += 1
    wait = limiter.acquire("10.0.0.1", "someone")
    assert wait == 57.0  # now 1003; the first failure (1000) leaves the window at 1060
    assert limiter.acquire("10.0.0.2", "someone") is None  # another address
    limiter.release("10.0.0.2", "someone", failed=False)
    clock.now = 1060.5
    assert limiter.acquire("10.0.0.1", "someone") is None  # one failure aged out
    limiter.release("10.0.0.1", "someone", failed=True)
    assert limiter.acquire("10.0.0.1", "someone") is not None


def test_successes_are_not_counted_and_names_are_limited_too() -> None:
    clock = Clock()
    limiter = LoginLimiter(LoginLimits(per_address=5, per_user=4, window_s=10), clock=clock)
    for _ in range(20):
        assert limiter.acquire("10.0.0.1", "alice") is None
        limiter.release("10.0.0.1", "alice", failed=False)
    for i in range(4):  # four addresses, one failure each, all for bob
        assert limiter.acquire(f"10.0.1.{i}", "bob") is None
        limiter.release(f"10.0.1.{i}", "bob", failed=True)
    assert limiter.acquire("10.0.2.1", "bob") is not None
    assert limiter.acquire("10.0.2.1", "alice") is None


def test_attempts_in_flight_count() -> None:
    limiter = LoginLimiter(LoginLimits(per_address=2, per_user=100, window_s=60), clock=Clock())
    assert limiter.acquire("10.0.0.1", "a") is None
    assert limiter.acquire("10.0.0.1", "b") is None
    assert limiter.acquire("10.0.0.1", "c") is not None  # two checks still running
    limiter.release("10.0.0.1", "a", failed=False)
    assert limiter.acquire("10.0.0.1", "c") is None


def test_memory_is_bounded() -> None:
    limiter = LoginLimiter(LoginLimits(per_address=3, per_user=3, window_s=60,
                                       max_tracked=50), clock=Clock())
    for i in range(1000):
        address, user = f"10.{i // 250}.{i % 250}.1", f"user{i}"
        assert limiter.acquire(address, user) is None
        limiter.release(address, user, failed=True)
    assert limiter.tracked() == (50, 50)


def test_limits_are_validated() -> None:
    for bad in ({"per_address": 0}, {"per_user": 0}, {"window_s": 0}, {"max_tracked": 0}):
        with pytest.raises(ValueError):
            LoginLimits(**bad)


# ---- the authenticator's unknown-user cache (real ZooKeeper) ---------------------------------

class CountingConfigs:
    """The real ZooKeeper entity-config store, counting the reads the authenticator makes."""

    def __init__(self, store: EntityConfigStore) -> None:
        self.store = store
        self.reads = 0

    def get(self, path: str) -> dict[str, str]:
        self.reads += 1
        return self.store.get(path)

    def alter(self, path: str, updates: Mapping[str, str | None]) -> dict[str, str]:
        return self.store.alter(path, updates)


@pytest.fixture
def zk(zookeeper_hosts: str) -> Iterator[KazooClient]:
    client = kazoo_client(fresh_chroot(zookeeper_hosts, "login"))
    try:
        yield client
    finally:
        client.stop()
        client.close()


def test_unknown_users_are_remembered_briefly(zk: KazooClient) -> None:
    clock = Clock()
    configs = CountingConfigs(EntityConfigStore(zk))
    auth = ScramAuthenticator(configs, clock=clock, negative_ttl=5.0)
    for _ in range(20):
        assert auth.mechanism("mallory", "guess") is None
    assert configs.reads == 1
    store_user_credential(configs.store, "mallory", "SCRAM-SHA-256", "now-real")
    assert auth.mechanism("mallory", "now-real") is None  # still remembered as unknown
    clock.now += 5.1
    assert auth.mechanism("mallory", "now-real") == "SCRAM-SHA-256"
    reads = configs.reads
    assert auth.mechanism("mallory", "wrong") is None  # a known user: checked every time
    assert auth.mechanism("mallory", "wrong") is None
    assert configs.reads == reads + 2
    assert auth.cached("mallory", "now-real") == "SCRAM-SHA-256"
    assert auth.cached("mallory", "wrong") is None


def test_an_unknown_user_costs_the_pbkdf2_work_of_a_known_one(
        zk: KazooClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Refusing a made-up name must not be faster than refusing a real user's wrong password
    (a timing oracle for which user names exist): both derive the same PBKDF2 keys. Counted,
    not timed: every derivation goes through the real function, recorded on the way."""
    import loglake.basic_auth as basic_auth

    derived: list[tuple[str, int]] = []
    real = basic_auth.salted_password

    def counted(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
        derived.append((mechanism, iterations))
        return real(mechanism, password, salt, iterations)

    monkeypatch.setattr(basic_auth, "salted_password", counted)
    store = EntityConfigStore(zk)
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        store_user_credential(store, "alice", mechanism, "alice-secret")
    auth = ScramAuthenticator(store, clock=Clock())

    assert auth.verify("alice", "wrong") is False
    known = sorted(derived)
    assert known == [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 4096)]
    for attempt in range(2):  # first read from ZooKeeper, then from the unknown-user cache
        derived.clear()
        assert auth.verify("nobody", "wrong") is False, attempt
        assert sorted(derived) == known, attempt


# ---- real HTTP -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def console_url(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str
                ) -> Iterator[str]:
    connect = fresh_chroot(zookeeper_hosts, "login-limits")
    zk = kazoo_client(connect)
    try:
        zk.create("/cluster/id", b'{"version":"1","id":"login-limits"}', makepath=True)
        for user, password in PASSWORDS.items():
            store_user_credential(EntityConfigStore(zk), user, "SCRAM-SHA-512", password)
    finally:
        zk.stop()
        zk.close()
    process = ConsoleProcess(
        connect, Path(tmp_path_factory.mktemp("console-login")),
        extra_args=("--basic-auth", "--max-login-failures", "3",
                    "--max-login-failures-per-user", "6"))
    with process:
        # --basic-auth without --certfile: the operator is told passwords travel in clear
        wait_until(lambda: "passwords travel in clear text" in process.log(), timeout=10.0,
                   message=lambda: f"no plaintext-login warning:\n{process.log()}")
        yield process.url


def _get(url: str, auth: tuple[str, str] | None, source: str = "127.0.0.1") -> httpx.Response:
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(base_url=url, auth=auth, transport=transport, timeout=30.0) as http:
        return http.get("/static/console.css")


def test_failed_logins_from_an_address_get_429(console_url: str) -> None:
    source = "127.0.0.1"
    assert _get(console_url, ("alice", PASSWORDS["alice"]), source).status_code == 200
    for _ in range(3):
        assert _get(console_url, ("bob", "wrong"), source).status_code == 401
    refused = _get(console_url, ("bob", "wrong"), source)
    assert refused.status_code == 429, refused.text
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert "too many failed logins" in refused.text
    # a right password not accepted recently is not even checked from this address now
    assert _get(console_url, ("carol", PASSWORDS["carol"]), source).status_code == 429
    # alice's login was accepted moments ago: her session goes on
    assert _get(console_url, ("alice", PASSWORDS["alice"]), source).status_code == 200
    # no credentials: a 401 asking for them (nothing to limit), the liveness probe open
    assert _get(console_url, None, source).status_code == 401
    with httpx.Client(base_url=console_url, timeout=10.0) as http:
        assert http.get("/healthz").text == "ok"
    # another address is not limited
    assert _get(console_url, ("carol", PASSWORDS["carol"]), "127.0.0.2").status_code == 200


def test_failed_logins_for_a_name_get_429_from_any_address(console_url: str) -> None:
    for i in range(6):  # two failures from each of three addresses, all for dave
        source = f"127.0.1.{10 + i // 2}"
        assert _get(console_url, ("dave", f"guess-{i}"), source).status_code == 401
    refused = _get(console_url, ("dave", PASSWORDS["dave"]), "127.0.1.20")
    assert refused.status_code == 429, refused.text
    assert int(refused.headers["retry-after"]) >= 1
    # others log in from that address
    assert _get(console_url, ("carol", PASSWORDS["carol"]), "127.0.1.20").status_code == 200
