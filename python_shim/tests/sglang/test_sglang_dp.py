"""`sglang serve --dp-size 2` served by atom-go: one scheduler, one atom-plugin per DP rank.

SGLang's data-parallel controller starts one scheduler process per rank and balances requests
over them; the plugin's worker in each scheduler starts its own atom-plugin. One server serves
the module: two distinct plugins must serve, concurrent greedy requests must reach both ranks,
and every output must equal `atom-plugin generate`'s tokens.
"""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
import re
import time
from collections.abc import Callable, Iterator

import pytest
from sglang_support import PROMPTS, Reference, require_entry_point, require_sglang
from test_sglang_server import SGLANG_SERVE, STARTUP_TIMEOUT, Server, _ok

require_sglang()

DP = 2
# "[2026-01-01 00:00:00 DP1] atom-go 0.1.0 (pid 123) serves ... in slot mode" (atom_go.sglang.engine)
SERVES = re.compile(r"\[[^\]]* DP(\d+)\] atom-go \S+ \(pid (\d+)\) serves .* in slot mode")
PREFILL = re.compile(r"\[[^\]]* DP(\d+)\] Prefill batch")


@pytest.fixture(scope="module")
def dp_server(atom_plugin: str, qwen2_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    require_entry_point()
    env = dict(os.environ)
    # One engine thread per plugin: two plugins share the CI machine's cores.
    env.update({"SGLANG_PLUGINS": "atom_go", "ATOM_GO_PLUGIN": atom_plugin, "ATOM_GO_ENGINE_ARGS": "--threads=1"})
    env.pop("ATOM_GO_SGLANG", None)
    env.pop("SGLANG_CPU_OMP_THREADS_BIND", None)  # atom-go sets it for the DP ranks
    args = ["--model-path", qwen2_dir, "--dp-size", str(DP), "--max-total-tokens", "1024"]
    args += ["--max-running-requests", "8", "--log-level", "info"]
    srv = Server(SGLANG_SERVE, args, env, str(tmp_path_factory.mktemp("sglang-dp")))
    try:
        srv.wait_ready(STARTUP_TIMEOUT)
        yield srv
    finally:
        srv.stop()
        print("---- SGLang server log (tail) ----\n" + srv.log_tail(150))  # shown when a test fails


def _prefills(srv: Server) -> dict[int, int]:
    counts = {rank: 0 for rank in range(DP)}
    for line in list(srv.lines):
        m = PREFILL.search(line)
        if m:
            counts[int(m.group(1))] += 1
    return counts


def _wait(cond: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    """The log reader thread may not have read a scheduler's line when the response comes."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_one_atom_go_engine_per_rank(dp_server: Server) -> None:
    plugins: dict[int, int] = {}
    for line in dp_server.lines:
        m = SERVES.search(line)
        if m:
            plugins[int(m.group(1))] = int(m.group(2))
    assert sorted(plugins) == list(range(DP)), dp_server.log_tail()
    assert len(set(plugins.values())) == DP, plugins
    for pid in plugins.values():
        exe = os.readlink(f"/proc/{pid}/exe")
        assert pathlib.Path(exe).name.startswith("atom-plugin"), exe
    assert any("SGLANG_CPU_OMP_THREADS_BIND=" in line for line in dp_server.lines), dp_server.log_tail()


def test_concurrent_greedy_requests_use_both_ranks(dp_server: Server, reference: Reference) -> None:
    max_new = 12
    before = _prefills(dp_server)
    prompts = [*PROMPTS, (3, 1, 4, 1, 5, 9, 2, 6)]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        futures = {p: pool.submit(dp_server.generate, list(p), max_new) for p in prompts}
        results = {p: _ok(f.result(timeout=120)) for p, f in futures.items()}
    for p, out in results.items():
        assert out["output_ids"] == reference.tokens(p, max_new), f"prompt of {len(p)} tokens"
    # SGLang's controller spread the batch: both ranks' schedulers prefilled some of it.
    _wait(lambda: all(_prefills(dp_server)[r] > before[r] for r in range(DP)), "both ranks to prefill")
    after = _prefills(dp_server)
    spread = {r: after[r] - before[r] for r in range(DP)}
    print(f"\nprefill batches per rank: {spread}")


@pytest.mark.parametrize("rank", range(DP))
def test_each_rank_gives_the_single_engine_tokens(dp_server: Server, reference: Reference, rank: int) -> None:
    """A request routed to one rank (SGLang's routed_dp_rank) runs on that rank's atom-go."""
    before = _prefills(dp_server)
    prompt = PROMPTS[2]
    out = _ok(dp_server.generate(list(prompt), 16, routed_dp_rank=rank))
    assert out["output_ids"] == reference.tokens(prompt, 16)
    _wait(lambda: _prefills(dp_server)[rank] > before[rank], f"rank {rank} to prefill")
    assert _prefills(dp_server)[1 - rank] == before[1 - rank], "the other rank ran the request too"


def test_dp_rank_device_env() -> None:
    """What the worker gives each scheduler's plugin: rank r drives atom-go's TP GPUs from r*TP."""
    from types import SimpleNamespace

    from atom_go.sglang.worker import dp_rank_device_env, engine_tensor_parallel_size

    assert engine_tensor_parallel_size([]) == 1
    assert engine_tensor_parallel_size(["--threads=2", "--tensor-parallel-size=4"]) == 4
    assert engine_tensor_parallel_size(["--tensor-parallel-size", "2"]) == 2
    one = SimpleNamespace(dp_size=1, base_gpu_id=0, gpu_id_step=1)
    two = SimpleNamespace(dp_size=2, base_gpu_id=0, gpu_id_step=1)
    assert dp_rank_device_env(one, 0, [], "gpu", {}) == {}
    assert dp_rank_device_env(two, 1, [], "cpu", {}) == {}
    # SGLang gives DP rank 1 the GPU id 1 (its own tp_size is 1); atom-go's TP 2 needs GPUs 2, 3.
    tp2 = ["--tensor-parallel-size=2"]
    assert dp_rank_device_env(two, 1, tp2, "gpu", {}) == {"CUDA_VISIBLE_DEVICES": "2,3", "HIP_VISIBLE_DEVICES": "2,3"}
    assert dp_rank_device_env(two, 1, tp2, "auto", {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}) == {
        "CUDA_VISIBLE_DEVICES": "6,7"
    }
    based = SimpleNamespace(dp_size=2, base_gpu_id=2, gpu_id_step=1)
    assert dp_rank_device_env(based, 3, [], "gpu", {})["CUDA_VISIBLE_DEVICES"] == "3"


def test_cpu_list() -> None:
    from atom_go.sglang.hooks import cpu_list

    assert cpu_list([0]) == "0"
    assert cpu_list([3, 0, 1, 2, 8, 10, 11]) == "0-3,8,10-11"
