"""The plugin's socket lives in a private 0700 directory that no way of stopping leaves behind.

Real subprocesses: the atom-plugin binary and, for the host's death, a Python host process
killed with SIGKILL. Needs only grpcio, protobuf, msgpack, cryptography and the binary
(``ATOM_GO_PLUGIN`` or the packaged one): no vLLM, no SGLang, no model.
"""

from __future__ import annotations

import os
import pathlib
import signal
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

import pytest

import atom_go
from atom_go.plugin import PluginProcess

pytestmark = pytest.mark.usefixtures("clean_env")


def _gone(pid: int) -> bool:
    """True once pid no longer runs (absent, or a zombie nobody reaped yet)."""
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def _wait_until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Polls cond until it holds; fails after timeout (a deadline, not a sleep to wait out)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def _exists(path: str) -> bool:
    return os.path.lexists(path)


def _check_private_socket(address: str) -> str:
    """Asserts that address is a socket directly in a 0700 directory; returns the directory."""
    directory = os.path.dirname(address)
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert stat.S_ISSOCK(os.lstat(address).st_mode)
    return directory


def _start(binary: str, auto_mtls: bool = False) -> tuple[PluginProcess, str, str]:
    p = PluginProcess(binary, auto_mtls=auto_mtls).start()
    hs = p.handshake
    assert hs is not None and hs.network == "unix"
    directory = _check_private_socket(hs.address)
    assert directory == p.socket_dir
    return p, hs.address, directory


@pytest.mark.parametrize("auto_mtls", [False, True], ids=["plaintext", "automtls"])
def test_shutdown_removes_socket_and_directory(plugin_binary: str, auto_mtls: bool) -> None:
    p, sock, directory = _start(plugin_binary, auto_mtls)
    assert p.shutdown() == 0
    _wait_until(lambda: not _exists(sock) and not _exists(directory), f"{directory} to go")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_signal_to_the_plugin_removes_socket_and_directory(plugin_binary: str, sig: signal.Signals) -> None:
    p, sock, directory = _start(plugin_binary)
    try:
        os.kill(p.pid, sig)
        assert p.wait_exit(30), "the plugin did not stop"
        assert p.returncode == 0, "a signal is an orderly stop"
        assert p.death is not None, "the host noticed the plugin going"
        _wait_until(lambda: not _exists(sock) and not _exists(directory), f"{directory} to go")
    finally:
        p.kill()


_HOST = """
import sys
from atom_go.plugin import PluginProcess
p = PluginProcess({binary!r}, auto_mtls={auto_mtls!r}).start()
print(p.pid, p.handshake.address, flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("auto_mtls", [False, True], ids=["plaintext", "automtls"])
def test_host_sigkill_leaves_no_socket_directory(plugin_binary: str, tmp_path: pathlib.Path, auto_mtls: bool) -> None:
    # The host cannot clean anything up: the plugin (SIGTERM from PR_SET_PDEATHSIG, or its own
    # watch of its parent) removes its socket, the host's TLS relay socket and the directory.
    script = tmp_path / "host.py"
    script.write_text(textwrap.dedent(_HOST.format(binary=plugin_binary, auto_mtls=auto_mtls)))
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(atom_go.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    host = subprocess.Popen(
        [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    pid = 0
    try:
        assert host.stdout is not None
        line = host.stdout.readline().split()
        assert len(line) == 2, f"host printed {line!r}"
        pid, sock = int(line[0]), line[1]
        directory = _check_private_socket(sock)
        if auto_mtls:
            assert stat.S_ISSOCK(os.lstat(os.path.join(directory, "tls-relay")).st_mode)
        assert not _gone(pid)
        host.send_signal(signal.SIGKILL)
        host.wait(30)
        _wait_until(lambda: _gone(pid), f"plugin {pid} to stop after its host")
        _wait_until(lambda: not _exists(sock) and not _exists(directory), f"{directory} to go")
    finally:
        host.kill()
        host.wait(30)
        if pid and not _gone(pid):
            os.kill(pid, signal.SIGKILL)
