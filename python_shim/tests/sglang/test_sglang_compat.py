"""The plugin's check of SGLang's shape, and its loud refusal when a class it replaces changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from sglang_support import require_sglang

require_sglang()

import sglang  # noqa: E402
from sglang.srt.managers.tp_worker import TpModelWorker  # noqa: E402

from atom_go.sglang import SUPPORTED_SGLANG_VERSIONS, is_active  # noqa: E402
from atom_go.sglang.compat import SHAPES, SGLangShapeError, check_sglang, check_shape  # noqa: E402

TP_WORKER = "sglang.srt.managers.tp_worker.TpModelWorker"


def test_the_pinned_sglang_is_installed() -> None:
    assert sglang.__version__ in SUPPORTED_SGLANG_VERSIONS


def test_every_class_the_plugin_relies_on_has_the_expected_shape() -> None:
    assert check_sglang() == sglang.__version__
    for shape in SHAPES:
        assert check_shape(shape) == [], shape.target


class _OldTpModelWorker(TpModelWorker):
    """TpModelWorker as SGLang 0.4 had it: forward_batch_generation took a ModelWorkerBatch."""

    def forward_batch_generation(self, model_worker_batch: Any, launch_done: Any = None) -> Any:  # type: ignore[override]
        raise AssertionError("never called")


class _NoRunnerHook(TpModelWorker):
    _init_model_runner = None  # type: ignore[assignment]


@pytest.mark.parametrize(
    ("changed", "what"),
    [
        (_OldTpModelWorker, "TpModelWorker.forward_batch_generation"),
        (_NoRunnerHook, "TpModelWorker._init_model_runner"),
    ],
    ids=["changed-signature", "lost-method"],
)
def test_a_changed_worker_class_is_refused_naming_the_version(changed: type, what: str) -> None:
    with pytest.raises(SGLangShapeError) as err:
        check_sglang(overrides={TP_WORKER: changed})
    msg = str(err.value)
    assert f"sglang {sglang.__version__}" in msg
    assert what in msg
    assert "sglang==" in msg  # says what to install


def test_an_unsupported_release_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sglang, "__version__", "0.9.1")
    monkeypatch.delenv("ATOM_GO_SGLANG_ANY_VERSION", raising=False)
    with pytest.raises(SGLangShapeError, match=r"sglang 0\.9\.1 is not a supported release"):
        check_sglang()
    monkeypatch.setenv("ATOM_GO_SGLANG_ANY_VERSION", "1")
    assert check_sglang() == "0.9.1"


@pytest.mark.parametrize(
    ("env", "active"),
    [
        ({}, False),
        ({"SGLANG_PLUGINS": "smg-zmq"}, False),
        ({"SGLANG_PLUGINS": "smg-zmq, atom_go"}, True),
        ({"ATOM_GO_SGLANG": "1"}, True),
        ({"ATOM_GO_SGLANG": "0", "SGLANG_PLUGINS": "atom_go"}, False),
    ],
)
def test_the_plugin_is_active_only_when_asked(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], active: bool
) -> None:
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    monkeypatch.delenv("ATOM_GO_SGLANG", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert is_active() is active


# Runs in a fresh interpreter: SGLang's plugin loader, with SGLang's TpModelWorker changed the way
# an SGLang upgrade could change it, must leave SGLang's worker alone and make the scheduler and
# the server arguments refuse to start with the version in the message.
_REFUSAL_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from sglang.srt.managers import tp_worker

    def forward_batch_generation(self, model_worker_batch, launch_done=None):
        raise AssertionError("never called")

    original = tp_worker.TpModelWorker
    original.forward_batch_generation = forward_batch_generation
    from sglang.srt.plugins import load_plugins
    load_plugins()
    out = {"replaced": tp_worker.TpModelWorker is not original}
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.server_args import ServerArgs
    for name, start in (
        ("scheduler", lambda: Scheduler(None, None)),
        ("server_args", lambda: ServerArgs(model_path="unused").resolve_once()),
    ):
        try:
            start()
            out[name] = None
        except Exception as exc:
            out[name] = [type(exc).__name__, str(exc)]
    print("RESULT " + json.dumps(out))
    """
)


def test_sglangs_plugin_loader_refuses_to_start_a_changed_sglang(tmp_path: Any) -> None:
    from sglang_support import require_entry_point

    require_entry_point()
    env = dict(os.environ, SGLANG_PLUGINS="atom_go")
    env.pop("ATOM_GO_SGLANG", None)
    proc = subprocess.run(
        [sys.executable, "-c", _REFUSAL_SCRIPT],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,  # not python_shim/: a source-tree atom_go.egg-info would hide the entry point
        timeout=300,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, proc.stdout + proc.stderr
    out = json.loads(lines[-1][len("RESULT ") :])
    assert out["replaced"] is False
    for name in ("scheduler", "server_args"):
        kind, msg = out[name]
        assert kind == "SGLangShapeError", out[name]
        assert f"sglang {sglang.__version__}" in msg and "forward_batch_generation" in msg, msg
    # SGLang's loader logged the refusal too (it logs what a plugin raises).
    assert "cannot attach to sglang" in proc.stderr
