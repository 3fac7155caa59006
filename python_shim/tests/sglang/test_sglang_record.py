"""SGLang's own Scheduler on atom-go with ATOM_GO_RECORD set, then `atom-plugin replay` of what
it recorded, which must be exact on the cpu (docs/recording.md).

The scheduler is built and stepped as in test_sglang_scheduler.py (SGLang's radix cache, token
allocator, chunked prefill, retraction and abort), but in a child process running this file as a
script: SGLang builds its parallel runtime once per process, and test_sglang_scheduler.py's
scheduler owns the one of the pytest process. The KV pool is small
enough that SGLang must retract, greedy, seeded and logprob requests, two requests sharing a
prompt and an abort mid-decode. With ATOM_GO_RECORDINGS_OUT set the recording is copied there
(`make recordings`).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
from array import array
from typing import Any

import pytest
from sglang_support import require_entry_point, require_sglang

require_sglang()

VOCAB = 384
KV_SLOTS = 260
RECORDING_NAME = "sglang-qwen2.rec"
STOP = 155  # a token the greedy continuation of the "stop" request reaches (it ends there)


def _submit(s: Any, rid: str, prompt: list[int], max_new: int, *, logprobs: int = -1, **sp_kw: Any) -> Any:
    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
    from sglang.srt.sampling.sampling_params import SamplingParams

    sp_kw.setdefault("ignore_eos", True)
    sp = SamplingParams(max_new_tokens=max_new, **sp_kw)
    sp.normalize(None)
    sp.verify(VOCAB)
    s.handle_generate_request(
        TokenizedGenerateReqInput(
            input_text=None,
            input_ids=array("q", prompt),
            mm_inputs=None,
            input_embeds=None,
            token_type_ids=None,
            sampling_params=sp,
            return_logprob=logprobs >= 0,
            logprob_start_len=-1,
            top_logprobs_num=max(logprobs, 0),
            token_ids_logprob=None,
            stream=False,
            rid=rid,
        )
    )
    return s.waiting_queue[-1]


def _step(s: Any) -> None:
    """One turn of Scheduler.event_loop_normal."""
    plan = s.get_next_batch_to_run(running_batch=s.running_batch, last_batch=s.last_batch)
    s.running_batch = plan.running_batch
    batch = plan.batch_to_run
    if batch:
        s.process_batch_result(batch, s.run_batch(batch))
    else:
        s.on_idle()
    s.last_batch = batch


def _idle(s: Any) -> bool:
    return not s.waiting_queue and (s.running_batch is None or s.running_batch.is_empty()) and s.last_batch is None


def _run(s: Any, on_step: Any = None) -> None:
    for step in range(2000):
        _step(s)
        if on_step is not None:
            on_step(step)
        if _idle(s):
            return
    raise RuntimeError("the scheduler was still busy after 2000 steps")


def _workload(s: Any) -> dict[str, Any]:
    from sglang.srt.managers.io_struct import AbortReq

    # Phase 1, as test_sglang_scheduler.py: more greedy decoding than the slots hold (SGLang
    # retracts), an abort mid-decode, two requests on one prompt (the radix cache moves one onto
    # the other's slots).
    reqs: dict[str, Any] = {}
    for i in range(6):
        prompt = list(range(10 + i, 40 + i))  # 30 tokens: two prefill chunks
        reqs[f"g{i}"] = _submit(s, f"g{i}", prompt, 70, temperature=0, ignore_eos=False)
    same = [7] * 20
    reqs["dupA"] = _submit(s, "dupA", same, 10, temperature=0, ignore_eos=False)
    reqs["dupB"] = _submit(s, "dupB", same, 10, temperature=0, ignore_eos=False)

    def abort_g1(step: int) -> None:
        if step == 12:
            s.abort_request(AbortReq(rid="g1"))

    _run(s, abort_g1)
    # Phase 2: seeded and unseeded sampling, logprobs with and without alternatives.
    reqs["seeded"] = _submit(s, "seeded", list(range(60, 80)), 40, temperature=0.8, top_p=0.9, sampling_seed=7)
    reqs["seeded-lp"] = _submit(s, "seeded-lp", list(range(61, 75)), 30, temperature=0.7, sampling_seed=3, logprobs=2)
    reqs["random"] = _submit(s, "random", list(range(90, 100)), 30, temperature=1.0, logprobs=0)
    reqs["greedy-lp"] = _submit(s, "greedy-lp", list(range(120, 150)), 40, temperature=0, logprobs=3)
    # n = 2 as SGLang's tokenizer manager expands it (one request per choice, seed + i), and a stop
    # token the scheduler ends a request on.
    for i in range(2):
        reqs[f"n2-{i}"] = _submit(s, f"n2-{i}", list(range(200, 212)), 20, temperature=0.9, sampling_seed=11 + i)
    reqs["stop"] = _submit(s, "stop", list(range(230, 240)), 30, temperature=0, ignore_eos=False, stop_token_ids=[STOP])
    _run(s)
    return reqs


def record(plugin: str, model: str, rec: str) -> dict[str, Any]:
    """Runs the workload on SGLang's Scheduler with atom-go recording to rec; returns what the
    test checks of SGLang's side (the child process's result)."""
    os.environ.update(
        {
            "SGLANG_PLUGINS": "atom_go",
            "ATOM_GO_PLUGIN": plugin,
            "ATOM_GO_ENGINE_ARGS": "--threads=2",
            "ATOM_GO_RECORD": rec,
        }
    )
    os.environ.pop("ATOM_GO_SGLANG", None)
    require_entry_point()
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.plugins import load_plugins
    from sglang.srt.runtime_context import SpawnRanks, publish
    from sglang.srt.server_args import PortArgs, ServerArgs

    load_plugins()
    server_args = ServerArgs(
        model_path=model,
        max_total_tokens=KV_SLOTS,
        max_running_requests=8,
        chunked_prefill_size=16,
        skip_tokenizer_init=True,
    )
    server_args.resolve_once()
    port_args = PortArgs.init_new(server_args)
    publish(server_args, role="scheduler", ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0))
    scheduler = Scheduler(server_args, port_args)
    # Admit as if decoding needed no room, so that SGLang runs out of slots and retracts.
    tracker = scheduler.new_token_ratio_tracker
    tracker.init = tracker.current = tracker.min = tracker.decay = 0.0
    try:
        reqs = _workload(scheduler)
    finally:
        scheduler.tp_worker.shutdown()
    return {
        "retractions": sum(r.retraction_count for r in reqs.values()),
        "g1_finish": type(reqs["g1"].finished_reason).__name__,
        "stop_finish": type(reqs["stop"].finished_reason).__name__,
        "stop_tokens": len(reqs["stop"].output_ids),
        "n2_outputs": [list(reqs[f"n2-{i}"].output_ids) for i in range(2)],
    }


@pytest.fixture(scope="module")
def recorded(atom_plugin: str, qwen2_dir: str, tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    rec = tmp_path_factory.mktemp("sglang-record") / RECORDING_NAME
    child = subprocess.run(
        [sys.executable, __file__, atom_plugin, qwen2_dir, str(rec)],
        cwd=pathlib.Path(__file__).parent,
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert child.returncode == 0, child.stderr[-4000:]
    summary = json.loads(child.stdout.strip().splitlines()[-1])
    assert summary["retractions"] >= 1, "SGLang never retracted a request"
    assert summary["g1_finish"] == "FINISH_ABORT"
    assert summary["stop_finish"] == "FINISH_MATCHED_TOKEN" and summary["stop_tokens"] < 30, summary
    assert summary["n2_outputs"][0] != summary["n2_outputs"][1], "two seeds drew the same choice"
    assert rec.is_file()
    out = os.environ.get("ATOM_GO_RECORDINGS_OUT")
    if out:
        shutil.copyfile(rec, pathlib.Path(out) / RECORDING_NAME)
    return rec


def _replay(binary: str, rec: pathlib.Path, *args: str) -> tuple[int, dict[str, Any], str]:
    cmd = [binary, "replay", "--json", *args, str(rec)]
    out = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300)
    report = json.loads(out.stdout) if out.stdout.strip() else {}
    return out.returncode, report, out.stderr


def test_the_recording_replays_exactly_on_the_cpu(atom_plugin: str, recorded: pathlib.Path) -> None:
    code, report, stderr = _replay(atom_plugin, recorded)
    assert code == 0, (stderr, report.get("mismatch"))
    assert report["ok"] is True
    assert report["mismatches"] == 0 and report["num_near_ties"] == 0 and report["skipped"] == 0
    assert report["max_logprob_diff"] <= 1e-5
    tokens, work = report["tokens"], report["workload"]
    print(f"\nSGLang recording: {recorded.stat().st_size} bytes, {report['steps']} steps, {tokens}, {work}")
    assert tokens["greedy"] > 0 and tokens["seeded"] > 0 and tokens["random"] > 0, tokens
    assert work["prefill_chunks"] > 0, work
    assert work["finished"] > 0, work


if __name__ == "__main__":
    print(json.dumps(record(*sys.argv[1:4])))
