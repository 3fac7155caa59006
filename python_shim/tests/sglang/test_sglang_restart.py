"""A real SGLang server whose atom-plugin is SIGKILLed mid-stream: restarted, requests recomputed.

One `sglang serve --enable-metrics` with a restart budget of two (ATOM_GO_MAX_RESTARTS=2), twice:
16 concurrent greedy streams, the plugin killed as the first of them reports its first token;
every stream must end with exactly the tokens of `atom-plugin generate`, /health answers 200 and
/metrics counts the restarts and the recomputed requests. A third kill is beyond the budget:
SGLang's scheduler fails and the server exits its own way, leaving no atom-plugin process and no
socket directory.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import os
import pathlib
import shutil
import signal
import tempfile
import threading
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


def test_sglang_survives_a_killed_plugin(
    atom_plugin: str,
    qwen2_dir: str,
    reference: Reference,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Short enough for the plugins' socket paths (else they would go to /tmp itself).
    sockets = pathlib.Path(tempfile.mkdtemp(prefix="sg", dir="/tmp"))
    monkeypatch.setenv("ATOM_GO_MAX_RESTARTS", "2")
    monkeypatch.setenv("TMPDIR", str(sockets))  # where the plugins' socket directories go
    srv = _start(SGLANG_SERVE, atom_plugin, qwen2_dir, str(tmp_path), "--enable-metrics")
    killed: list[int] = []
    try:
        assert _metrics(srv).get("atom_go_engine_restarts_total", 0.0) == 0.0
        for n in (1, 2):
            killed.append(_kill_under_streams(srv, atom_plugin, reference))
            log = "\n".join(srv.lines)
            assert log.count("atom-plugin restarted") == n, srv.log_tail()
            with urllib.request.urlopen(srv.url("/health"), timeout=60) as resp:
                assert resp.status == 200
            plugins = _plugins(srv.proc.pid, atom_plugin)
            assert len(plugins) == 1 and plugins[0] not in killed
        m = _metrics(srv)
        assert m["atom_go_engine_restarts_total"] == 2.0, m
        # Recomputed at each kill: the requests the engine held (up to --max-running-requests, 8),
        # and later the queued ones whose radix-cache hit is on slots the dead engine wrote.
        assert 2.0 <= m["atom_go_recomputed_requests_total"] <= 2.0 * STREAMS, m
        assert m["atom_go_engine_recovery_seconds"] > 0.0, m
        assert m["atom_go_engine_restarting"] == 0.0, m

        # A third death is beyond the budget of two: SGLang's scheduler fails and the server
        # ends, taking nothing of atom-go with it.
        os.kill(plugins[0], signal.SIGKILL)
        killed.append(plugins[0])
        try:
            resp: Any = srv.generate([5, 6, 7], 8)
        except (OSError, http.client.HTTPException) as exc:  # the server went down mid-request
            resp = exc
        assert not (isinstance(resp, dict) and "output_ids" in resp), resp
        srv.proc.wait(timeout=120)
        assert "restart budget 2" in "\n".join(srv.lines), srv.log_tail()
    finally:
        srv.stop()
        print("---- SGLang server log (tail) ----\n" + srv.log_tail(150))
    for pid in killed:
        assert not pathlib.Path(f"/proc/{pid}").exists(), f"atom-plugin {pid} is left"
    left = list(sockets.glob("atomgo-*"))  # SGLang keeps files of its own there too
    shutil.rmtree(sockets, ignore_errors=True)
    assert not left, "socket directories are left"
