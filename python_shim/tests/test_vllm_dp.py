"""`vllm serve --data-parallel-size 2` on atom-go's cpu backend: one atom-go engine per DP rank.

vLLM starts one engine-core process per data-parallel rank (and, by default, one API server per
rank, balancing requests over the engines); each engine core's AtomGoExecutor starts its own
atom-plugin. One server serves the module: two distinct plugins must serve, concurrent greedy
requests must reach both engines, and every output must equal `atom-plugin generate`'s tokens.
"""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import test_vllm_e2e
from test_vllm_e2e import MODEL_NAME, Server, _poll, _serve_until_done, _start

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

# The e2e module's fixture: greedy tokens of `atom-plugin generate` for a prompt.
reference = test_vllm_e2e.reference

DP = 2
# "atom-go 0.1.0 (pid 123, data-parallel rank 1) loaded ..." (atom_go.vllm.executor), prefixed
# by vLLM with the engine core's process name.
LOADED = re.compile(r"\(EngineCore_DP(\d+) pid=\d+\).*atom-go \S+ \(pid (\d+), data-parallel rank (\d+)\) loaded")


@pytest.fixture(scope="module")
def dp_server(plugin_binary: str, model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("vllm-dp") / "serve.log"
    t0 = time.monotonic()
    proc, url = _start(
        # One engine thread per plugin: two plugins share the CI machine's cores.
        {"ATOM_GO_PLUGIN": plugin_binary, "ATOM_GO_ENGINE_ARGS": "--threads=1"},
        model_dir,
        log,
        "--data-parallel-size",
        str(DP),
        "--max-model-len",
        "256",
        "--max-num-seqs",
        "8",
    )
    yield from _serve_until_done(Server(proc, url, log, 0.0), t0, f"vllm serve --data-parallel-size {DP}")


def _plugins(srv: Server) -> dict[int, int]:
    """DP rank -> atom-plugin pid, from the executors' start-up lines."""
    found: dict[int, int] = {}
    for m in LOADED.finditer(srv.log_text()):
        core_rank, pid, rank = int(m.group(1)), int(m.group(2)), int(m.group(3))
        assert core_rank == rank, m.group(0)
        found[rank] = pid
    return found


def _per_engine(srv: Server, name: str) -> dict[str, float]:
    """A counter of vLLM's /metrics summed per engine label (the DP rank)."""
    totals: dict[str, float] = {}
    for line in httpx.get(srv.url + "/metrics", timeout=30).text.splitlines():
        if line.startswith(name + "{"):
            m = re.search(r'engine="(\d+)"', line)
            if m:
                totals[m.group(1)] = totals.get(m.group(1), 0.0) + float(line.rsplit(" ", 1)[1])
    return totals


def _completion(srv: Server, prompt: str | list[int], max_tokens: int, rank: int | None = None) -> Any:
    headers = {"X-data-parallel-rank": str(rank)} if rank is not None else {}
    r = httpx.post(
        srv.url + "/v1/completions",
        json={
            "model": MODEL_NAME,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "return_token_ids": True,
        },
        headers=headers,
        timeout=120,
    )
    r.raise_for_status()
    return r.json()["choices"][0]


def test_one_atom_go_engine_per_rank(dp_server: Server) -> None:
    plugins = _plugins(dp_server)
    assert sorted(plugins) == list(range(DP)), dp_server.log_text()[-6000:]
    pids = set(plugins.values())
    assert len(pids) == DP, plugins
    for pid in pids:
        assert pathlib.Path(f"/proc/{pid}").exists(), f"atom-plugin {pid} is not running"
        exe = os.readlink(f"/proc/{pid}/exe")
        assert os.path.basename(exe).startswith("atom-plugin"), exe
    # vLLM's /collective_rpc reaches the first engine: rank 0's executor and plugin.
    r = httpx.post(dp_server.url + "/collective_rpc", json={"method": "atom_go_describe"}, timeout=30)
    r.raise_for_status()
    d = r.json()["results"][0]
    assert d["data_parallel_index"] == 0 and d["pid"] == plugins[0]
    assert d["host_mode"] is True and d["tensor_parallel_size"] == 1
    if not any(os.environ.get(v) for v in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ATOM_GO_VISIBLE_DEVICES")):
        # --device auto: each rank's plugin is told its own GPU (none here, so both run on the cpu).
        text = dp_server.log_text()
        for rank in range(DP):
            assert f"atom-go of data-parallel rank {rank} sees devices CUDA_VISIBLE_DEVICES={rank}," in text


def test_concurrent_greedy_requests_use_both_engines(dp_server: Server, reference: Any) -> None:
    before = _per_engine(dp_server, "vllm:request_success_total")
    prompts = [f"request {chr(97 + i)}: once upon a time" for i in range(8)]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        choices = list(pool.map(lambda p: _completion(dp_server, p, 12), prompts))
    for p, c in zip(prompts, choices, strict=True):
        # atom-plugin generate gets the ids vLLM's tokenizer made (test_vllm_e2e says why).
        assert c["token_ids"] == reference(c["prompt_token_ids"])["token_ids"], p

    # vLLM's API servers balanced the batch over the two engine cores (their only executors are
    # atom-go's): both finished some of it.
    def both_served() -> dict[str, float] | None:
        after = _per_engine(dp_server, "vllm:request_success_total")
        delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in map(str, range(DP))}
        return delta if all(v > 0 for v in delta.values()) else None

    delta = _poll(both_served, 30, "both engines to report finished requests", interval=0.5)
    print(f"\nrequests finished per engine: {delta}")


@pytest.mark.parametrize("rank", range(DP))
def test_each_rank_gives_the_single_engine_tokens(dp_server: Server, reference: Any, rank: int) -> None:
    """A request routed to one rank (vLLM's X-data-parallel-rank header) runs on that rank's
    atom-go and returns the greedy tokens of one engine."""
    before = _per_engine(dp_server, "vllm:request_success_total").get(str(rank), 0.0)
    prompt = [5, 17, 42, 99, 100, 3]
    c = _completion(dp_server, prompt, 16, rank=rank)
    assert c["token_ids"] == reference(prompt, max_tokens=16)["token_ids"]
    _poll(
        lambda: _per_engine(dp_server, "vllm:request_success_total").get(str(rank), 0.0) > before,
        30,
        f"engine {rank} to report the request",
        interval=0.5,
    )


def test_plugin_device_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the executor gives a rank's plugin from vLLM's assigned_physical_gpu_ids."""
    from atom_go.vllm.executor import plugin_device_env

    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ATOM_GO_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    assert plugin_device_env(None, "auto") == {}  # one rank: atom-go uses GPUs 0..TP-1 as before
    assert plugin_device_env([2, 3], "cpu") == {}  # the cpu backend: each rank is its own process
    assert plugin_device_env([2, 3], "gpu") == {"CUDA_VISIBLE_DEVICES": "2,3", "HIP_VISIBLE_DEVICES": "2,3"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    assert plugin_device_env([2, 3], "gpu") == {"CUDA_VISIBLE_DEVICES": "6,7"}
    # vLLM numbered the devices in the platform's device-control variable: they are final.
    monkeypatch.setenv("ATOM_GO_VISIBLE_DEVICES", "6,7")
    assert plugin_device_env([6, 7], "gpu") == {"CUDA_VISIBLE_DEVICES": "6,7", "HIP_VISIBLE_DEVICES": "6,7"}


def test_a_replica_across_hosts_is_refused() -> None:
    """`--nnodes 2` splits one replica (TP/PP) over two hosts: atom-go's TP stays inside a host."""
    from types import SimpleNamespace

    from atom_go.vllm.platform import AtomGoConfigError, AtomGoPlatform

    pc = SimpleNamespace(
        pipeline_parallel_size=1,
        decode_context_parallel_size=1,
        prefill_context_parallel_size=1,
        tensor_parallel_size=2,
        nnodes=2,
        nnodes_within_dp=2,
    )
    cfg = SimpleNamespace(model_config=SimpleNamespace(), parallel_config=pc)
    with pytest.raises(AtomGoConfigError, match=r"--nnodes 2 .*inside one host"):
        AtomGoPlatform.check_and_update_config(cfg)  # type: ignore[arg-type]
