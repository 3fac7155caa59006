"""SGLang's own Scheduler, driven in this process, with atom-go as its model worker.

The plugin is loaded the way SGLang loads it (``load_plugins()`` with ``SGLANG_PLUGINS=atom_go``),
then a real ``Scheduler`` is built (its ScheduleBatch, radix cache, token allocator, chunked
prefill, retraction and abort logic) and its event loop is stepped by hand, as
``Scheduler.event_loop_normal`` does, so that the test can look at SGLang's Req objects and at
atom-go's state between steps. The worker starts the real atom-plugin.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sglang_support import Reference, require_entry_point, require_sglang

require_sglang()

VOCAB = 384
KV_SLOTS = 260  # small: SGLang must retract a request to finish the load below


class Driver:
    """A Scheduler and the hand-stepped loop of Scheduler.event_loop_normal."""

    def __init__(self, scheduler: Any) -> None:
        self.s = scheduler
        self.steps = 0
        self.steps_at_start = 0
        self.modes: list[str] = []

    @property
    def worker(self) -> Any:
        return self.s.tp_worker

    def submit(self, rid: str, prompt: list[int], max_new_tokens: int, *, ignore_eos: bool = False) -> Any:
        from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
        from sglang.srt.sampling.sampling_params import SamplingParams

        sp = SamplingParams(temperature=0, max_new_tokens=max_new_tokens, ignore_eos=ignore_eos)
        sp.normalize(None)
        sp.verify(VOCAB)
        self.s.handle_generate_request(
            TokenizedGenerateReqInput(
                input_text=None,
                input_ids=array("q", prompt),
                mm_inputs=None,
                input_embeds=None,
                token_type_ids=None,
                sampling_params=sp,
                return_logprob=False,
                logprob_start_len=-1,
                top_logprobs_num=0,
                token_ids_logprob=None,
                stream=False,
                rid=rid,
            )
        )
        req = self.s.waiting_queue[-1]
        assert req.rid == rid
        return req

    def abort(self, rid: str) -> None:
        from sglang.srt.managers.io_struct import AbortReq

        self.s.abort_request(AbortReq(rid=rid))

    def step(self) -> Any:
        s = self.s
        plan = s.get_next_batch_to_run(running_batch=s.running_batch, last_batch=s.last_batch)
        s.running_batch = plan.running_batch
        batch = plan.batch_to_run
        if batch:
            result = s.run_batch(batch)
            s.process_batch_result(batch, result)
            self.modes.append(batch.forward_mode.name)
        else:
            s.on_idle()
        s.last_batch = batch
        self.steps += 1
        return batch

    def idle(self) -> bool:
        s = self.s
        return not s.waiting_queue and (s.running_batch is None or s.running_batch.is_empty()) and s.last_batch is None

    def run(self, limit: int = 2000, on_step: Callable[[int], None] | None = None) -> None:
        """Steps until the scheduler is idle (one idle step included)."""
        for _ in range(limit):
            self.step()
            if on_step is not None:
                on_step(self.steps)
            if self.idle():
                return
        pytest.fail(f"the scheduler was still busy after {limit} steps")


@pytest.fixture(scope="module")
def driver(atom_plugin: str, qwen2_dir: str) -> Iterator[Driver]:
    saved = {
        k: os.environ.get(k) for k in ("SGLANG_PLUGINS", "ATOM_GO_PLUGIN", "ATOM_GO_ENGINE_ARGS", "ATOM_GO_SGLANG")
    }
    os.environ.update(
        {"SGLANG_PLUGINS": "atom_go", "ATOM_GO_PLUGIN": atom_plugin, "ATOM_GO_ENGINE_ARGS": "--threads=2"}
    )
    os.environ.pop("ATOM_GO_SGLANG", None)
    try:
        require_entry_point()
        from sglang.srt.managers.scheduler import Scheduler
        from sglang.srt.plugins import load_plugins
        from sglang.srt.runtime_context import SpawnRanks, publish
        from sglang.srt.server_args import PortArgs, ServerArgs

        load_plugins()
        server_args = ServerArgs(
            model_path=qwen2_dir,
            max_total_tokens=KV_SLOTS,
            max_running_requests=8,
            chunked_prefill_size=16,
            skip_tokenizer_init=True,
        )
        server_args.resolve_once()
        port_args = PortArgs.init_new(server_args)
        publish(server_args, role="scheduler", ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0))
        scheduler = Scheduler(server_args, port_args)
        # Admit as if requests needed no room to decode, so that SGLang runs out of KV slots
        # mid-decode and retracts (its new-token estimate is what normally prevents that).
        tracker = scheduler.new_token_ratio_tracker
        tracker.init = tracker.current = tracker.min = tracker.decay = 0.0
        drv = Driver(scheduler)
        yield drv
        drv.worker.shutdown()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_the_plugin_replaced_sglangs_worker(driver: Driver) -> None:
    from sglang.srt.managers import tp_worker

    from atom_go.sglang.worker import AtomGoModelRunner, AtomGoTpModelWorker

    assert tp_worker.TpModelWorker is AtomGoTpModelWorker
    assert isinstance(driver.worker, AtomGoTpModelWorker)
    assert isinstance(driver.worker.model_runner, AtomGoModelRunner)
    info = driver.worker.atom.describe()
    assert info.host_mode and info.block_size == 1
    assert info.num_kv_blocks == KV_SLOTS + 1  # slot 0 is SGLang's padding slot
    assert driver.s.token_to_kv_pool_allocator.available_size() == KV_SLOTS


def test_batching_chunked_prefill_retraction_abort_and_shared_prefixes(driver: Driver, reference: Reference) -> None:
    prompts = {f"r{i}": list(range(10 + i, 40 + i)) for i in range(6)}  # 30 tokens: 2 prefill chunks
    max_new = 70
    reqs = {rid: driver.submit(rid, p, max_new) for rid, p in prompts.items()}
    # Two requests with the same prompt prefill side by side: SGLang's radix cache then keeps one
    # copy of the shared KV and moves the other request onto it.
    same = [7] * 20
    reqs["dupA"] = driver.submit("dupA", same, 10)
    reqs["dupB"] = driver.submit("dupB", same, 10)
    running_at_abort: list[str] = []

    def abort_r1(step: int) -> None:
        if step == 12:
            running_at_abort.extend(r.rid for r in driver.s.running_batch.reqs)
            driver.abort("r1")

    driver.run(on_step=abort_r1)

    assert "r1" in running_at_abort, "the aborted request was not decoding when it was aborted"
    assert type(reqs["r1"].finished_reason).__name__ == "FINISH_ABORT"
    n1 = len(reqs["r1"].output_ids)
    assert 0 < n1 < max_new
    assert list(reqs["r1"].output_ids) == reference.tokens(prompts["r1"], max_new, ignore_eos=False)[:n1]
    for rid, prompt in prompts.items():
        if rid == "r1":
            continue
        assert reqs[rid].finished(), rid
        assert list(reqs[rid].output_ids) == reference.tokens(prompt, max_new, ignore_eos=False), rid
    assert list(reqs["dupA"].output_ids) == reference.tokens(same, 10, ignore_eos=False)
    assert list(reqs["dupB"].output_ids) == reference.tokens(same, 10, ignore_eos=False)

    stats = driver.worker.slot_stats
    assert sum(r.retraction_count for r in reqs.values()) >= 1, "SGLang never retracted a request"
    assert stats.resent >= 1  # the retracted request came back as new
    assert stats.replaced_tables >= 1  # the shared-prefix request's slots moved under it
    assert {"EXTEND", "DECODE"} <= set(driver.modes)
    # Everything finished: atom-go keeps no request state (the idle step freed the last ones).
    assert driver.worker.atom.describe().running_requests == 0
    assert driver.worker.running_requests() == []


def test_eos_stops_like_atom_plugin_generate(driver: Driver, reference: Reference) -> None:
    prompt = list(range(14, 44))  # atom-go's greedy continuation reaches EOS (token 2) at 24 tokens
    req = driver.submit("eos", prompt, 70)
    driver.run()
    want = reference.tokens(prompt, 70, ignore_eos=False)
    assert len(want) < 70
    assert list(req.output_ids) == want
    assert type(req.finished_reason).__name__ == "FINISH_MATCHED_TOKEN"


def test_a_reused_request_id_starts_afresh(driver: Driver, reference: Reference) -> None:
    first = driver.submit("same-id", [1, 2, 3], 5, ignore_eos=True)
    driver.run()
    second = driver.submit("same-id", [9, 8, 7, 6], 5, ignore_eos=True)
    driver.run()
    assert list(first.output_ids) == reference.tokens([1, 2, 3], 5)
    assert list(second.output_ids) == reference.tokens([9, 8, 7, 6], 5)
    assert driver.worker.atom.describe().running_requests == 0


def test_a_killed_plugin_is_restarted_and_its_requests_recomputed(driver: Driver, reference: Reference) -> None:
    """SIGKILL the plugin twice mid-run (chunked prefill, radix sharing, retraction in flight):
    the worker restarts it, recomputes the live requests, and every request gets exactly the
    tokens of atom-plugin generate; a request hitting the radix cache on slots written before
    the kill is recomputed too."""
    import signal

    host = driver.worker.atom.host
    restarts = host.restarts
    prompts = {f"k{i}": list(range(20 + i, 50 + i)) for i in range(6)}
    max_new = 60
    reqs = {rid: driver.submit(rid, p, max_new) for rid, p in prompts.items()}
    killed: list[int] = []

    def kill(step: int) -> None:
        if step in (driver.steps_at_start + 9, driver.steps_at_start + 30):
            pid = host.process.pid
            os.kill(pid, signal.SIGKILL)
            assert host.process.wait_exit(30)
            killed.append(pid)

    driver.steps_at_start = driver.steps
    driver.run(on_step=kill)
    assert len(killed) == 2
    assert host.restarts == restarts + 2
    assert host.recomputed > 0
    for rid, prompt in prompts.items():
        assert reqs[rid].finished(), rid
        assert list(reqs[rid].output_ids) == reference.tokens(prompt, max_new, ignore_eos=False), rid
    # A third kill, while the scheduler is idle: the radix cache still holds k5's prompt in
    # slots the dead engine wrote, so a request sharing it is recomputed before its step (no
    # new token's attention may read a stale slot). check_health restarts the plugin if the
    # watcher's restart has not yet.
    os.kill(host.process.pid, signal.SIGKILL)
    assert host.process.wait_exit(30)
    host.check_health()
    assert host.restarts == restarts + 3
    recomputed = host.recomputed
    again = driver.submit("again", prompts["k5"] + [5, 6], 12)
    driver.run()
    assert host.recomputed > recomputed, "the radix-cache hit on stale slots was not recomputed"
    assert list(again.output_ids) == reference.tokens(prompts["k5"] + [5, 6], 12, ignore_eos=False)
    assert driver.worker.atom.describe().running_requests == 0
    for pid in killed:  # reaped: no zombie or orphan is left
        assert not os.path.exists(f"/proc/{pid}"), pid
