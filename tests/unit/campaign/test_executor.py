"""The executor's typed ends before any task: a --scheduler that is no address (exit 2), one where
nothing listens (exit 3, bounded by the connect timeout)."""

from __future__ import annotations

import time

import pytest

from harness.campaign import executor
from harness.campaign.executor import ClusterError, Executor
from harness.cli import main
from tests.support.dask_cluster import free_port


def test_a_scheduler_that_is_no_address_is_bad_usage(capsys):
    assert main(["fuzz", "--static", "--scheduler", "nonsense"]) == 2
    assert "--scheduler 'nonsense': not an address (tcp://HOST:PORT)" in capsys.readouterr().err


def test_a_scheduler_nobody_runs_is_exit_3_within_the_connect_timeout(monkeypatch):
    monkeypatch.setattr(executor, "CONNECT_TIMEOUT", 2.0)
    t = time.monotonic()
    with pytest.raises(ClusterError) as exc:
        with Executor(f"tcp://127.0.0.1:{free_port()}"):
            pass
    assert exc.value.exit_code == 3 and "Timed out trying to connect" in str(exc.value)
    assert time.monotonic() - t < 15
