"""The demo's waits (loglake/demo_jobs.py ``wait_until``): they say where they stand while they
wait and end with an error naming what was awaited and its last state. In-process, no cluster."""

from __future__ import annotations

import pytest

from loglake import demo_jobs


def test_wait_prints_progress_and_returns_when_done(monkeypatch, capsys):
    monkeypatch.setattr(demo_jobs, "PROGRESS_EVERY_S", 0.05)
    calls = iter(range(100))

    def probe() -> tuple[bool, str]:
        n = next(calls)
        return n >= 8, f"step {n}"

    demo_jobs.wait_until(probe, what="waiting for a test", timeout=10, interval=0.02)
    out = capsys.readouterr().out
    assert "still waiting for a test after" in out and ": step " in out


def test_wait_ends_with_the_last_state_after_its_bound(monkeypatch):
    monkeypatch.setattr(demo_jobs, "PROGRESS_EVERY_S", 0.05)
    with pytest.raises(RuntimeError, match=r"waiting for a test: not done after 0.2 s \(stuck"):
        demo_jobs.wait_until(lambda: (False, "stuck at 3"), what="waiting for a test",
                             timeout=0.2, interval=0.02)
