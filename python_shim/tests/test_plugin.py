"""The go-plugin host against the real atom-plugin binary: real subprocesses, real sockets."""

from __future__ import annotations

import logging
import os
import pathlib
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time

import grpc
import pytest

from atom_go import plugin as plugin_mod
from atom_go._proto import atom_pb2
from atom_go.client import EngineClient
from atom_go.plugin import (
    PluginDiedError,
    PluginError,
    PluginNotFoundError,
    PluginProcess,
    PluginRPCError,
    PluginStartError,
    find_plugin_binary,
)
from atom_go.versions import MAGIC_COOKIE_KEY

pytestmark = pytest.mark.usefixtures("clean_env")


def _gone(pid: int) -> bool:
    """True once pid no longer runs (absent, or a zombie nobody reaped yet)."""
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def _wait_until(cond: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.02)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


@pytest.mark.parametrize("auto_mtls", [False, True], ids=["plaintext", "automtls"])
def test_start_describe_generate_shutdown(plugin_binary: str, model_dir: str, auto_mtls: bool) -> None:
    p = PluginProcess(plugin_binary, auto_mtls=auto_mtls).start()
    try:
        assert p.alive()
        hs = p.handshake
        assert hs is not None and hs.network == "unix" and hs.app_version == 1
        assert (hs.server_cert_der is not None) == auto_mtls
        sockdir = os.path.dirname(hs.address)
        assert stat.S_IMODE(os.stat(sockdir).st_mode) == 0o700
        assert os.stat(sockdir).st_uid == os.getuid()
        p.check_health()
        c = EngineClient(p)
        info = c.describe()
        assert (info.wire_version, info.protocol_version, info.loaded) == (1, 1, False)
        info = c.load_model(model_dir)
        assert info.loaded and info.architecture == "Qwen2ForCausalLM" and info.block_size == 16
        params = atom_pb2.SamplingParams(temperature=0, max_tokens=4)
        outs = [o for r in c.generate("r1", prompt_token_ids=[1, 17, 42, 99, 7], params=params) for o in r.outputs]
        tokens = [t for o in outs for t in o.token_ids]
        assert len(tokens) == 4 and outs[-1].finished
    finally:
        rc = p.shutdown()
    assert rc == 0
    assert not os.path.exists(sockdir)
    assert not p.alive()
    with pytest.raises(PluginError, match="shut down"):
        p.check_health()


def test_automtls_refuses_a_client_without_certificate(plugin_binary: str) -> None:
    with PluginProcess(plugin_binary, auto_mtls=True) as p:
        assert p.handshake is not None
        ch = grpc.insecure_channel(p.handshake.grpc_target)
        try:
            with pytest.raises(grpc.FutureTimeoutError):
                grpc.channel_ready_future(ch).result(timeout=1.0)
        finally:
            ch.close()
        p.check_health()  # the host's own (TLS) channel still works


def test_plugin_logs_reach_python_logging(plugin_binary: str, model_dir: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="atom_go.plugin")
    with PluginProcess(plugin_binary) as p:
        EngineClient(p).load_model(model_dir)
        _wait_until(
            lambda: any("model loaded" in r.getMessage() for r in caplog.records), 10, "the plugin's 'model loaded' log"
        )
    rec = next(r for r in caplog.records if "model loaded" in r.getMessage())
    assert rec.levelno == logging.INFO
    assert "model=" in rec.getMessage()


def test_rpc_error_is_reported_with_its_code(plugin_binary: str) -> None:
    with PluginProcess(plugin_binary) as p:
        c = EngineClient(p)
        with pytest.raises(PluginRPCError) as err:
            c.load_model("/nonexistent/checkpoint")
        assert err.value.code == grpc.StatusCode.NOT_FOUND
        with pytest.raises(PluginRPCError, match="FAILED_PRECONDITION"):
            c.init_kv_cache(8, 16)
        assert p.alive()


def test_death_is_noticed_and_reported(plugin_binary: str, model_dir: str) -> None:
    p = PluginProcess(plugin_binary).start()
    died = threading.Event()
    errors: list[PluginDiedError] = []

    def on_death(err: PluginDiedError) -> None:
        errors.append(err)
        died.set()

    p.add_death_callback(on_death)
    c = EngineClient(p)
    c.load_model(model_dir)
    stream = c.generate(
        "long",
        prompt_token_ids=[1, 2, 3],
        params=atom_pb2.SamplingParams(temperature=0, max_tokens=200, ignore_eos=True),
    )
    next(stream)
    os.kill(p.pid, signal.SIGKILL)
    assert died.wait(10), "the death callback did not run"
    assert "killed by SIGKILL" in str(errors[0])
    assert errors[0].returncode == -signal.SIGKILL
    with pytest.raises(PluginDiedError):
        for _ in stream:
            pass
    with pytest.raises(PluginDiedError, match="SIGKILL"):
        c.describe()
    late: list[PluginDiedError] = []
    p.add_death_callback(late.append)  # registered after the death: runs at once
    assert late == [errors[0]]
    p.shutdown()
    # The host can start a new plugin.
    with PluginProcess(plugin_binary) as q:
        assert EngineClient(q).describe().wire_version == 1


def test_shutdown_kills_a_plugin_that_does_not_stop(plugin_binary: str, caplog: pytest.LogCaptureFixture) -> None:
    p = PluginProcess(plugin_binary).start()
    os.kill(p.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    rc = p.shutdown(grace=0.5)
    assert rc == -signal.SIGKILL
    assert time.monotonic() - t0 < 15
    assert any("killing it" in r.getMessage() for r in caplog.records)


def test_child_dies_with_its_parent(plugin_binary: str, tmp_path: pathlib.Path) -> None:
    script = tmp_path / "host.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            from atom_go.plugin import PluginProcess
            p = PluginProcess({plugin_binary!r}).start()
            print(p.pid, flush=True)
            sys.stdin.read()
            """
        )
    )
    host = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert host.stdout is not None
        pid = int(host.stdout.readline())
        assert not _gone(pid)
        host.kill()
        host.wait(10)
        _wait_until(lambda: _gone(pid), 10, f"plugin {pid} to die with its host")
    finally:
        host.kill()
        host.wait(10)


def test_missing_binary_says_what_to_do(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.setenv("ATOM_GO_PLUGIN", str(tmp_path / "nope"))
    with pytest.raises(PluginNotFoundError, match=r"ATOM_GO_PLUGIN=.*does not name an executable file"):
        PluginProcess().start()
    monkeypatch.delenv("ATOM_GO_PLUGIN")
    monkeypatch.setattr(plugin_mod, "packaged_binary", lambda: str(tmp_path / "bin" / "atom-plugin"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PluginNotFoundError) as err:
        find_plugin_binary()
    assert "make python-plugin" in str(err.value)
    assert "ATOM_GO_PLUGIN" in str(err.value)
    with pytest.raises(PluginNotFoundError, match="does not exist or is not executable"):
        find_plugin_binary(tmp_path / "missing")


def test_wrong_protocol_version_fails_at_start(plugin_binary: str) -> None:
    p = PluginProcess(plugin_binary, app_versions=(2,))
    with pytest.raises(PluginStartError) as err:
        p.start()
    msg = str(err.value)
    assert "protocol version 1" in msg and "speaks 2" in msg
    assert "make python-plugin" in msg
    assert p.returncode is not None  # the plugin was stopped


def test_wrong_cookie_is_explained(plugin_binary: str) -> None:
    with pytest.raises(PluginStartError, match="refused the magic cookie"):
        PluginProcess(plugin_binary, env={MAGIC_COOKIE_KEY: "wrong"}).start()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["/bin/true"], "closed its stdout before the handshake and exited with status 0"),
        (["/bin/echo", "hello"], "wrote 'hello' where go-plugin's handshake"),
        (["/bin/sh", "-c", "echo boom >&2; exit 3"], "exited with status 3\nlast lines of the plugin's stderr:\nboom"),
    ],
)
def test_not_a_plugin(argv: list[str], message: str) -> None:
    with pytest.raises(PluginStartError) as err:
        PluginProcess(argv[0], args=argv[1:]).start()
    assert message in str(err.value)


def test_start_timeout(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "silent"
    script.write_text("#!/bin/sh\nexec sleep 60\n")
    script.chmod(0o755)
    p = PluginProcess(script, start_timeout=0.5)
    with pytest.raises(PluginStartError, match=r"no handshake line within 0\.5 s"):
        p.start()
    assert p.returncode is not None


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="start_timeout"):
        PluginProcess(start_timeout=0)
    with pytest.raises(ValueError, match="app_versions"):
        PluginProcess(app_versions=())


def test_pdeathsig_kills_the_child_when_the_host_dies(tmp_path: pathlib.Path) -> None:
    # `sleep` does not watch its parent itself (atom-plugin also polls getppid as a fallback):
    # its death proves PR_SET_PDEATHSIG.
    script = tmp_path / "host.py"
    script.write_text(
        textwrap.dedent(
            """
            import subprocess, sys
            from atom_go.plugin import _pdeathsig_preexec
            child = subprocess.Popen(["sleep", "600"], preexec_fn=_pdeathsig_preexec())
            print(child.pid, flush=True)
            sys.stdin.read()
            """
        )
    )
    host = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pid = 0
    try:
        assert host.stdout is not None
        pid = int(host.stdout.readline())
        assert not _gone(pid)
        host.kill()
        host.wait(10)
        _wait_until(lambda: _gone(pid), 10, f"sleep {pid} to die with its host")
    finally:
        host.kill()
        host.wait(10)
        if pid and not _gone(pid):
            os.kill(pid, signal.SIGKILL)
