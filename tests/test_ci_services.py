"""The control scripts of ``.ci/services`` own their servers by PID file: on a port held by a
process that is not theirs, ``start`` refuses with a message naming the holder, ``stop`` leaves
it alone and ``status`` says no. Each script is run for real, copied with its port pointed at a
socket this test holds and its files at a fresh directory."""

from __future__ import annotations

import os
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPTS = {
    "redis-ctl": "ROLLMEM_TEST_REDIS_CTL",
    "redis-cluster-ctl": "ROLLMEM_TEST_REDIS_CLUSTER_CTL",
    "postgres-ctl": "ROLLMEM_TEST_POSTGRES_CTL",
    "pgbouncer-ctl": "ROLLMEM_TEST_PGBOUNCER_CTL",
}


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port on loopback held by this process: someone else's server, for the scripts."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


def _script(name: str, port: int, home: Path) -> Path:
    variable = SCRIPTS[name]
    original = os.environ.get(variable)
    if not original:
        if os.environ.get("ROLLMEM_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{variable} is not set: source .ci/services first")
        pytest.skip(f"{variable} is not set (source .ci/services)")
    text = Path(original).read_text()
    if "refuse()" not in text:
        pytest.skip(f"{original} was written by an older .ci/services (re-source it)")
    text = re.sub(r"(?m)^(port|cluster_ports)=.*$", rf"\1={port}", text)
    text = re.sub(r"(?m)^(dir|data)=.*$", rf"\1={home}", text)
    text = re.sub(r"(?m)^(pidfile|conf|log)=.*$", rf"\1={home}/\1", text)
    copy = home / name
    copy.write_text(text)
    copy.chmod(0o755)
    return copy


def _run(script: Path, action: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(script), action], capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_a_control_script_leaves_a_port_it_does_not_own_alone(
    name: str, held_port: int, tmp_path: Path
) -> None:
    script = _script(name, held_port, tmp_path)
    started = _run(script, "start")
    assert started.returncode == 1
    assert started.stderr.strip() == (
        f"{name}: 127.0.0.1:{held_port} is held by another process (pid {os.getpid()}), not the server "
        "this script started; refusing to start it (free the port or pick another with the "
        "ROLLMEM_*_PORT settings)"
    )
    assert _run(script, "status").returncode != 0
    stopped = _run(script, "stop")
    assert (stopped.returncode, stopped.stderr) == (0, "")
    with socket.create_connection(("127.0.0.1", held_port), timeout=5):
        pass  # still listening: the stop left it alone
