"""The shim's restart of a dead atom-plugin in host mode: real subprocesses, killed mid-stream.

A small vLLM-like scheduler (block tables, chunked prefill, decodes, a prefix-cache hit on the
blocks of a finished request, finished ids) drives :class:`atom_go.restart.RestartingHost`; the
plugin dies mid-stream (an injected exit inside a step, a SIGKILL between steps) and every
request must produce exactly the tokens of an uninterrupted run: greedy, seeded sampling, and
penalties and min_tokens too (host mode counts a recomputed request's history as its outputs).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from atom_go import health
from atom_go.client import EngineClient
from atom_go.plugin import PluginProcess
from atom_go.recovery import StepLedger
from atom_go.restart import (
    ENV_MAX_RESTARTS,
    ENV_RESTART_WINDOW,
    EngineGoneError,
    RestartBudget,
    RestartingHost,
    RestartPolicy,
)
from atom_go.wire import ExecuteResult, sampling_params

pytestmark = pytest.mark.usefixtures("clean_env")

BLOCK = 16
NUM_BLOCKS = 96
MAX_TOKENS_PER_STEP = 48  # small, so that prefills and recomputes take several steps


@dataclasses.dataclass
class _Req:
    rid: str
    prompt: list[int]
    params: dict[str, Any]
    max_tokens: int
    arrive: int  # the step it is scheduled first
    prefix_of: str | None = None  # reuses that finished request's first block (a prefix hit)
    table: list[int] = dataclasses.field(default_factory=list)
    computed: int = 0
    out: list[int] = dataclasses.field(default_factory=list)
    started: bool = False
    done: bool = False


class _Host:
    """A vLLM-like host scheduler over a RestartingHost: what it sends is what vLLM would."""

    def __init__(self, host: RestartingHost, reqs: list[_Req]) -> None:
        self.host = host
        self.reqs = reqs
        self.free = list(range(1, NUM_BLOCKS))  # block 0 is vLLM's null block
        self.cached: dict[str, list[int]] = {}  # finished requests' full blocks (the prefix cache)
        self.finished: list[str] = []
        self.step_no = 0

    def _alloc(self, r: _Req, upto: int) -> list[int]:
        new: list[int] = []
        while len(r.table) * BLOCK < upto:
            b = self.free.pop(0)
            r.table.append(b)
            new.append(b)
        return new

    def step(self) -> ExecuteResult | None:
        budget = MAX_TOKENS_PER_STEP
        new_reqs: list[dict[str, Any]] = []
        cached: dict[str, list[Any]] = {
            "req_ids": [],
            "resumed_from_preemption": [],
            "new_block_ids": [],
            "num_computed_tokens": [],
            "num_output_tokens": [],
        }
        scheduled: dict[str, int] = {}
        for r in self.reqs:
            if r.done or r.arrive > self.step_no or budget == 0:
                continue
            if r.prefix_of is not None and r.prefix_of not in self.cached:
                continue  # arrives once the request it shares a prefix with has finished
            known = len(r.prompt) + len(r.out)
            if not r.started:
                hit = 0
                if r.prefix_of is not None:
                    r.table = [self.cached[r.prefix_of][0]]
                    hit = BLOCK
                r.computed = hit
                k = min(known - hit, budget)
                self._alloc(r, hit + k)
                new_reqs.append(
                    {
                        "req_id": r.rid,
                        "prompt_token_ids": list(r.prompt),
                        "sampling_params": r.params,
                        "block_ids": [list(r.table)],
                        "num_computed_tokens": hit,
                    }
                )
                r.started = True
            else:
                k = min(known - r.computed, budget)
                new = self._alloc(r, r.computed + k)
                cached["req_ids"].append(r.rid)
                cached["resumed_from_preemption"].append(False)
                cached["new_block_ids"].append([new] if new else None)
                cached["num_computed_tokens"].append(r.computed)
                cached["num_output_tokens"].append(len(r.out))
            scheduled[r.rid] = k
            budget -= k
        if not scheduled and not self.finished:
            return None
        payload = {
            "scheduled_new_reqs": new_reqs,
            "scheduled_cached_reqs": cached,
            "num_scheduled_tokens": scheduled,
            "total_num_scheduled_tokens": sum(scheduled.values()),
            "finished_req_ids": self.finished,
        }
        self.finished = []
        res = self.host.execute(payload)
        got = dict(zip(res.req_ids, res.sampled_token_ids, strict=True))
        assert set(got) == set(scheduled)
        for r in self.reqs:
            if r.rid not in scheduled:
                continue
            r.computed += scheduled[r.rid]
            toks = got[r.rid]
            assert bool(toks) == (r.computed == len(r.prompt) + len(r.out)), r.rid
            r.out.extend(toks)
            if len(r.out) >= r.max_tokens:
                r.done = True
                self.finished.append(r.rid)
                self.cached[r.rid] = r.table[: len(r.prompt) // BLOCK]
        self.step_no += 1
        return res

    def run(self, before_step: Callable[[int], None] = lambda _: None) -> dict[str, list[int]]:
        while not all(r.done for r in self.reqs) or self.finished:
            before_step(self.step_no)
            if self.step_no > 400:
                pytest.fail("the host made no progress")
            self.step()
        return {r.rid: r.out for r in self.reqs}


def _requests() -> list[_Req]:
    reqs: list[_Req] = []
    for i in range(6):
        prompt = [1 + (7 * i + 3 * j) % 300 for j in range(20 + 9 * i)]
        if i % 3 == 0:
            params = sampling_params(temperature=0.0, ignore_eos=True)
        elif i % 3 == 1:
            params = sampling_params(temperature=0.9, top_p=0.95, top_k=40, seed=100 + i, ignore_eos=True)
        else:
            params = sampling_params(
                temperature=0.8, seed=7 * i, presence_penalty=0.6, frequency_penalty=0.3, ignore_eos=True
            )
        reqs.append(_Req(f"r{i}", prompt, params, max_tokens=30 + 4 * i, arrive=i // 2))
    # Arrives once r1 finished, with a prefix hit on r1's first block: after a restart that
    # block holds nothing the new engine wrote, so it must be recomputed.
    first = reqs[1].prompt[:BLOCK]
    late_params = sampling_params(temperature=0.7, seed=5, min_tokens=6, stop_token_ids=[2], ignore_eos=True)
    reqs.append(_Req("late", first + [9, 8, 7, 6, 5], late_params, max_tokens=20, arrive=0, prefix_of="r1"))
    return reqs


def _launcher(binary: str, model_dir: str, envs: list[dict[str, str]]) -> tuple[Callable[[], Any], list[int]]:
    """launch() for a RestartingHost: the n-th launch gets envs[n] (the last one after that)."""
    pids: list[int] = []

    def launch() -> tuple[PluginProcess, EngineClient]:
        env = envs[min(len(pids), len(envs) - 1)]
        p = PluginProcess(binary, env=env).start()
        try:
            c = EngineClient(p)
            c.load_model(
                model_dir,
                device="cpu",
                num_kv_blocks=NUM_BLOCKS,
                block_size=BLOCK,
                max_num_seqs=8,
                max_num_batched_tokens=MAX_TOKENS_PER_STEP,
                extra_args=["--threads=1"],
            )
        except BaseException:
            p.shutdown()
            raise
        pids.append(p.pid)
        return p, c

    return launch, pids


def _host(binary: str, model_dir: str, envs: list[dict[str, str]], policy: RestartPolicy, **kw: Any) -> Any:
    launch, pids = _launcher(binary, model_dir, envs)
    h = RestartingHost(launch, policy, **kw)
    h.init_kv_cache(NUM_BLOCKS, BLOCK)
    return h, pids


def _gone(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


class _Observer:
    """Records what a RestartingHost tells its observers, and what /health would say meanwhile."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.requests = 0

    def set_restarting(self, restarting: bool) -> None:
        self.events.append(("restarting", restarting, health.restarting()))

    def restarted(self, recovery_seconds: float) -> None:
        assert recovery_seconds > 0
        self.events.append(("restarted",))

    def recomputed(self, requests: int) -> None:
        self.requests += requests


@pytest.mark.parametrize("fault", ["exit@12", "devicefault@12"])
def test_restart_recomputes_identically(
    plugin_binary: str, model_dir: str, fault: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first engine dies inside a step: it exits, or its device is corrupted (simulated on the
    cpu), after which the plugin exits on its own."""
    monkeypatch.setenv(health.ENV_STATE_ID, f"test{os.getpid()}")
    policy = RestartPolicy(max_restarts=2, window=300)
    ref_host, _ = _host(plugin_binary, model_dir, [{}], policy)
    try:
        want = _Host(ref_host, _requests()).run()
    finally:
        ref_host.shutdown()
    assert len({tuple(v) for v in want.values()}) == len(want)

    # The first engine exits inside its 12th ExecuteModel call (mid-step, mid-stream); the
    # second is SIGKILLed between steps, after the late request's prefix-cache block was
    # written by the first engine; the third runs to the end.
    observer = _Observer()
    host, pids = _host(
        plugin_binary,
        model_dir,
        [{"ATOM_GO_DEBUG_FAULT": fault}, {}],
        policy,
        observers=[health.RestartMarker(), None, observer],
    )
    try:

        def kill_second(step: int) -> None:
            if step == 40:
                assert host.restarts == 1
                os.kill(host.process.pid, signal.SIGKILL)
                assert host.process.wait_exit(30)

        got = _Host(host, _requests()).run(kill_second)
        assert host.restarts == 2
        for rid, toks in want.items():
            assert got[rid] == toks, rid
        assert host.recomputed > 0
        assert observer.requests == host.recomputed
        # The marker is there while each restart runs (its observer is told after it), and gone after.
        assert observer.events == [("restarting", True, True), ("restarting", False, False), ("restarted",)] * 2
        assert not health.restarting()
        assert host.info.num_kv_blocks == NUM_BLOCKS  # the block count the host allocated
        assert host.info.host_mode
        for rid, toks in want.items():
            assert got[rid] == toks, rid
        host.check_health()
        assert len(pids) == 3
        assert all(_gone(p) for p in pids[:2])
    finally:
        host.shutdown()
    assert all(_gone(p) for p in pids)


def test_restart_budget_ends_in_engine_gone(plugin_binary: str, model_dir: str) -> None:
    gone: list[EngineGoneError] = []
    # Every engine exits at its 5th step: one restart is allowed, the second death is beyond.
    host, pids = _host(
        plugin_binary,
        model_dir,
        [{"ATOM_GO_DEBUG_FAULT": "exit@5"}],
        RestartPolicy(max_restarts=1, window=300),
        on_gone=gone.append,
    )
    h = _Host(host, _requests())
    with pytest.raises(EngineGoneError, match="restart budget 1"):
        h.run()
    assert host.restarts == 1
    assert len(gone) == 1 and host.gone is gone[0]
    with pytest.raises(EngineGoneError):
        host.check_health()
    with pytest.raises(EngineGoneError):
        host.execute({"scheduled_new_reqs": [], "num_scheduled_tokens": {}, "finished_req_ids": []})
    host.shutdown()
    assert len(pids) == 2
    assert all(_gone(p) for p in pids)
    sockdir = host.process.socket_dir
    assert sockdir is None or not os.path.exists(sockdir)


def test_policy_from_config_and_env() -> None:
    assert RestartPolicy.from_config({}, {}) == RestartPolicy(3, 300.0)
    env = {ENV_MAX_RESTARTS: "5", ENV_RESTART_WINDOW: "60"}
    assert RestartPolicy.from_config(None, env) == RestartPolicy(5, 60.0)
    assert RestartPolicy.from_config({"max_restarts": 0}, env) == RestartPolicy(0, 60.0)
    for bad_cfg, bad_env, why in (
        ({"max_restarts": -1}, {}, "max_restarts must be >= 0"),
        ({}, {ENV_MAX_RESTARTS: "three"}, "ATOM_GO_MAX_RESTARTS='three': want a number"),
        ({}, {ENV_RESTART_WINDOW: "0"}, "restart window must be positive"),
        ({"restart_windw": 5}, {}, "unknown keys"),
        ({"max_restarts": 1.5}, {}, "config 'max_restarts'=1.5"),
    ):
        with pytest.raises(ValueError, match=why):
            RestartPolicy.from_config(bad_cfg, bad_env)


def test_policy_from_vllm_additional_config() -> None:
    env = {ENV_MAX_RESTARTS: "5"}
    assert RestartPolicy.from_additional_config(None, env) == RestartPolicy(5, 300.0)
    assert RestartPolicy.from_additional_config({"other": 1}, env) == RestartPolicy(5, 300.0)
    got = RestartPolicy.from_additional_config({"atom_go_restart": {"max_restarts": 1, "restart_window": 9}}, env)
    assert got == RestartPolicy(1, 9.0)
    with pytest.raises(ValueError, match="must be an object"):
        RestartPolicy.from_additional_config({"atom_go_restart": 3}, env)


def test_budget_window() -> None:
    now = [0.0]
    b = RestartBudget(RestartPolicy(max_restarts=2, window=10), clock=lambda: now[0])
    assert b.allow() and b.allow()
    now[0] = 5.0
    assert not b.allow()  # a third death within 10 s
    now[0] = 10.5  # the first two left the window; the third is still in it
    assert b.allow()
    assert b.recent == 2


def test_ledger_chunks_recompute_within_budgets() -> None:
    led = StepLedger(block_size=4, num_blocks=32)
    sp = sampling_params(temperature=0.0)
    first = {
        "scheduled_new_reqs": [
            {"req_id": "a", "prompt_token_ids": list(range(1, 11)), "sampling_params": sp, "block_ids": [[1, 2, 3]]},
            {"req_id": "b", "prompt_token_ids": [5, 6, 7], "sampling_params": sp, "block_ids": [[4]]},
        ],
        "num_scheduled_tokens": {"a": 10, "b": 3},
        "finished_req_ids": [],
    }
    led.commit(first, ExecuteResult(req_ids=["a", "b"], sampled_token_ids=[[42], [43]], logprobs=[None, None]))
    assert led.rewrite(first, max_tokens=8, max_seqs=8) == ([], first)
    led.lost()
    step = {
        "scheduled_new_reqs": [],
        "scheduled_cached_reqs": {
            "req_ids": ["a", "b"],
            "resumed_from_preemption": [False, False],
            "new_block_ids": [None, None],
            "num_computed_tokens": [10, 3],
            "num_output_tokens": [1, 1],
        },
        "num_scheduled_tokens": {"a": 1, "b": 1},
        "total_num_scheduled_tokens": 2,
        "finished_req_ids": ["gone"],
    }
    warm, out = led.rewrite(step, max_tokens=4, max_seqs=8)
    # 13 tokens to recompute in steps of at most 4: a's 10 then b's 3, nothing sampled.
    assert [w["num_scheduled_tokens"] for w in warm] == [{"a": 4}, {"a": 4}, {"a": 2, "b": 2}, {"b": 1}]
    assert warm[0]["scheduled_new_reqs"][0]["prompt_token_ids"] == [*range(1, 11), 42]
    assert warm[0]["scheduled_new_reqs"][0]["output_offset"] == 1
    assert warm[0]["finished_req_ids"] == ["gone"] and out["finished_req_ids"] == []
    assert out["scheduled_cached_reqs"]["req_ids"] == ["a", "b"]
    assert out["scheduled_cached_reqs"]["num_computed_tokens"] == [10, 3]
    assert out["num_scheduled_tokens"] == {"a": 1, "b": 1}
    for w in warm:
        ids = list(w["num_scheduled_tokens"])
        led.commit(w, ExecuteResult(req_ids=ids, sampled_token_ids=[[] for _ in ids], logprobs=[None for _ in ids]))
    # Known again: the next payload goes through as it is.
    assert led.rewrite(step | {"finished_req_ids": []}, max_tokens=4, max_seqs=8)[0] == []


def test_ledger_recomputes_a_known_request_moved_onto_stale_blocks() -> None:
    """After a restart, a request the new engine knows is resumed (vLLM) or has its table
    replaced (SGLang's radix dedup) onto blocks the dead engine wrote: it is forgotten and
    recomputed rather than attending over stale KV."""
    led = StepLedger(block_size=1, num_blocks=16)
    sp = sampling_params(temperature=0.0)
    old = {
        "scheduled_new_reqs": [
            {"req_id": "old", "prompt_token_ids": [1, 2, 3], "sampling_params": sp, "block_ids": [[1, 2, 3]]}
        ],
        "num_scheduled_tokens": {"old": 3},
        "finished_req_ids": [],
    }
    led.commit(old, ExecuteResult(req_ids=["old"], sampled_token_ids=[[9]], logprobs=[None]))
    led.lost()
    new = {
        "scheduled_new_reqs": [
            {"req_id": "n", "prompt_token_ids": [1, 2, 3, 4], "sampling_params": sp, "block_ids": [[5, 6, 7, 8]]}
        ],
        "num_scheduled_tokens": {"n": 4},
        "finished_req_ids": ["old"],
    }
    warm, out = led.rewrite(new, max_tokens=8, max_seqs=4)
    assert warm == [] and out["scheduled_new_reqs"] == new["scheduled_new_reqs"]  # no prefix hit: as it is
    led.commit(new, ExecuteResult(req_ids=["n"], sampled_token_ids=[[7]], logprobs=[None]))
    # The radix cache swaps n's first three slots for old's copy (slots 1..3, written before).
    moved = {
        "scheduled_new_reqs": [],
        "scheduled_cached_reqs": {
            "req_ids": ["n"],
            "resumed_from_preemption": [True],
            "new_block_ids": [[[1, 2, 3, 8, 9]]],
            "num_computed_tokens": [4],
        },
        "num_scheduled_tokens": {"n": 1},
        "finished_req_ids": [],
    }
    warm, out = led.rewrite(moved, max_tokens=8, max_seqs=4)
    assert len(warm) == 1 and warm[0]["finished_req_ids"] == ["n"]
    assert warm[0]["scheduled_new_reqs"][0]["block_ids"] == [[1, 2, 3, 8, 9]]
    assert warm[0]["scheduled_new_reqs"][0]["prompt_token_ids"] == [1, 2, 3, 4, 7]
    assert warm[0]["scheduled_new_reqs"][0]["output_offset"] == 1
    assert warm[0]["num_scheduled_tokens"] == {"n": 4}
    assert out["scheduled_cached_reqs"]["req_ids"] == ["n"]
    assert out["scheduled_cached_reqs"]["new_block_ids"] == [None]
    assert out["scheduled_cached_reqs"]["resumed_from_preemption"] == [False]


def test_restart_marker_is_seen_while_held(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mark is an abstract socket: seen while held, gone once closed (or its process died);
    another server's marks are not this one's."""
    monkeypatch.setenv(health.ENV_STATE_ID, f"mark{os.getpid()}")
    other = f"other{os.getpid()}"
    marker = health.RestartMarker()
    assert not health.restarting()
    marker.set_restarting(True)
    assert health.restarting()
    assert not health.restarting(other)
    marker.set_restarting(False)
    assert not health.restarting()
    # A process that holds another server's mark, then dies without closing it.
    code = "import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(chr(0)+sys.argv[1]); print(flush=True); input()"
    child = subprocess.Popen(
        [sys.executable, "-c", code, f"atomgo-restart-{other}-1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert child.stdout is not None and child.stdin is not None
    child.stdout.readline()
    assert health.restarting(other)
    child.kill()
    child.wait()
    assert not health.restarting(other)
