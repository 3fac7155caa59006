"""A real SGLang server whose atom-plugin is SIGKILLed mid-stream: restarted, requests recomputed.

One `sglang serve --enable-metrics` with a restart budget of three (ATOM_GO_MAX_RESTARTS=3), twice:
16 concurrent greedy streams, the plugin killed as the first of them reports its first token;
every stream must end with exactly the tokens of `atom-plugin generate`, /health answers 200 and
/metrics counts the restarts and the recomputed requests. The third restart is held (the served
checkpoint's config.json is a FIFO the new plugin blocks on) while /health answers 503. A fourth
kill is beyond the budget: SGLang's scheduler fails and the server exits its own way, leaving no
atom-plugin process and no socket directory.
"""

from __future__ import annotations

import concurrent.futures
import errno
import http.client
import os
import pathlib
import shutil
import signal
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from sglang_support import Reference, require_sglang
from test_sglang_server import SGLANG_SERVE, _start

require_sglang()

STREAMS = 16
MAX_NEW = 150


def _descendants(root: int) -> list[int]:
    """Every process below root, read from /proc."""
    children: dict[int, list[int]] = {}
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out: list[int] = []
    todo = [root]
    while todo:
        for kid in children.get(todo.pop(), []):
            out.append(kid)
            todo.append(kid)
    return out


def _plugins(root: int, binary: str) -> list[int]:
    pids = []
    for pid in _descendants(root):
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            continue
        if os.path.realpath(exe) == os.path.realpath(binary):
            pids.append(pid)
    return pids


def _metrics(srv: Any) -> dict[str, float]:
    """SGLang's /metrics, unlabelled series only."""
    with urllib.request.urlopen(srv.url("/metrics"), timeout=60) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if line and not line.startswith("#") and "{" not in name:
            out[name] = float(value)
    return out


def _kill_under_streams(srv: Any, atom_plugin: str, reference: Reference) -> int:
    """Runs STREAMS greedy streams, SIGKILLs the plugin as the first reports a token (each stream
    held at its first chunk until then) and requires every stream to end with the tokens of
    `atom-plugin generate`. Returns the killed pid."""
    prompts = [[1 + i, 20 + 3 * i, 7, 40 + i] for i in range(STREAMS)]
    first = threading.Event()
    go_on = threading.Event()

    def stream(i: int) -> list[int]:
        body: dict[str, Any] = {
            "input_ids": prompts[i],
            "sampling_params": {"temperature": 0, "max_new_tokens": MAX_NEW, "ignore_eos": True},
        }
        last: dict[str, Any] = {}
        for n, chunk in enumerate(srv.stream(body)):
            last = chunk
            if n == 0:
                first.set()
                go_on.wait(60)
        return list(last["output_ids"])

    with concurrent.futures.ThreadPoolExecutor(max_workers=STREAMS) as pool:
        futures = [pool.submit(stream, i) for i in range(STREAMS)]
        assert first.wait(120), srv.log_tail()
        plugins = _plugins(srv.proc.pid, atom_plugin)
        assert len(plugins) == 1, plugins
        os.kill(plugins[0], signal.SIGKILL)
        go_on.set()
        got = [f.result(timeout=300) for f in futures]
    for i, toks in enumerate(got):
        assert toks == reference.tokens(prompts[i], MAX_NEW), f"stream {i}\n{srv.log_tail()}"
    return plugins[0]


def _open_fifo_writer(path: pathlib.Path, timeout: float) -> int:
    """Opens the FIFO for writing once a reader has it open (ENXIO until then)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def _health(srv: Any) -> int:
    try:
        with urllib.request.urlopen(srv.url("/health"), timeout=60) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_sglang_survives_a_killed_plugin(
    atom_plugin: str,
    qwen2_dir: str,
    reference: Reference,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Short enough for the plugins' socket paths (else they would go to /tmp itself).
    sockets = pathlib.Path(tempfile.mkdtemp(prefix="sg", dir="/tmp"))
    served = tmp_path / "model"  # a copy: the held restart swaps a file of it
    shutil.copytree(qwen2_dir, served)
    monkeypatch.setenv("ATOM_GO_MAX_RESTARTS", "3")
    monkeypatch.setenv("TMPDIR", str(sockets))  # where the plugins' socket directories go
    srv = _start(SGLANG_SERVE, atom_plugin, str(served), str(tmp_path), "--enable-metrics")
    killed: list[int] = []
    try:
        assert _metrics(srv).get("atom_go_engine_restarts_total", 0.0) == 0.0
        for n in (1, 2):
            killed.append(_kill_under_streams(srv, atom_plugin, reference))
            log = "\n".join(srv.lines)
            assert log.count("atom-plugin restarted") == n, srv.log_tail()
            assert _health(srv) == 200
            plugins = _plugins(srv.proc.pid, atom_plugin)
            assert len(plugins) == 1 and plugins[0] not in killed
        m = _metrics(srv)
        assert m["atom_go_engine_restarts_total"] == 2.0, m
        # Recomputed at each kill: the requests the engine held (up to --max-running-requests, 8),
        # and later the queued ones whose radix-cache hit is on slots the dead engine wrote.
        assert 2.0 <= m["atom_go_recomputed_requests_total"] <= 2.0 * STREAMS, m
        assert m["atom_go_engine_recovery_seconds"] > 0.0, m
        assert m["atom_go_engine_restarting"] == 0.0, m

        # The third death (an idle engine) is within the budget; its restart is held on a FIFO.
        config = served / "config.json"
        content = config.read_bytes()
        fifo = served / "config.fifo"
        os.mkfifo(fifo)
        os.replace(fifo, config)
        try:
            os.kill(plugins[0], signal.SIGKILL)
            killed.append(plugins[0])
            fd = _open_fifo_writer(config, 60)  # the new plugin is loading: the restart runs
            during = _health(srv)
            restarting = _metrics(srv)["atom_go_engine_restarting"]
        finally:
            tmp = served / "config.tmp"
            tmp.write_bytes(content)
            os.replace(tmp, config)  # later reads get the file
        try:
            os.write(fd, content)
        finally:
            os.close(fd)
        assert during == 503, "/health while atom-plugin restarts"
        assert restarting == 1.0
        deadline = time.monotonic() + 60
        while "\n".join(srv.lines).count("atom-plugin restarted") < 3:
            assert time.monotonic() < deadline, srv.log_tail()
            time.sleep(0.1)
        assert _health(srv) == 200
        out = srv.generate([5, 6, 7], 8)
        assert isinstance(out, dict) and "output_ids" in out, out
        plugins = _plugins(srv.proc.pid, atom_plugin)
        assert len(plugins) == 1 and plugins[0] not in killed

        # A fourth death is beyond the budget of three: SGLang's scheduler fails and the server
        # ends, taking nothing of atom-go with it.
        os.kill(plugins[0], signal.SIGKILL)
        killed.append(plugins[0])
        try:
            resp: Any = srv.generate([5, 6, 7], 8)
        except (OSError, http.client.HTTPException) as exc:  # the server went down mid-request
            resp = exc
        assert not (isinstance(resp, dict) and "output_ids" in resp), resp
        srv.proc.wait(timeout=120)
        assert "restart budget 3" in "\n".join(srv.lines), srv.log_tail()
    finally:
        srv.stop()
        print("---- SGLang server log (tail) ----\n" + srv.log_tail(150))
    for pid in killed:
        assert not pathlib.Path(f"/proc/{pid}").exists(), f"atom-plugin {pid} is left"
    left = list(sockets.glob("atomgo-*"))  # SGLang keeps files of its own there too
    shutil.rmtree(sockets, ignore_errors=True)
    assert not left, "socket directories are left"
