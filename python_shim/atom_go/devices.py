"""Which GPUs an atom-plugin of one data-parallel rank may use (vLLM and SGLang alike).

Data parallelism through a framework runs one atom-go engine per rank: one atom-plugin child of
each vLLM engine-core process or SGLang scheduler process. atom-go's own tensor parallelism
drives the GPUs ``0 .. TP-1`` it sees, so rank ``r`` must see its own: the frameworks give it the
logical devices ``r*TP .. r*TP+TP-1`` (vLLM: ``parallel_config.assigned_physical_gpu_ids``;
SGLang: its base GPU id and step), and the plugin's child environment restricts
``CUDA_VISIBLE_DEVICES`` and ``HIP_VISIBLE_DEVICES`` to them. A restriction the user already set
is honoured the way vLLM honours ``CUDA_VISIBLE_DEVICES`` for its own workers: the logical
devices index into it (``CUDA_VISIBLE_DEVICES=4,5,6,7``, DP 2, TP 2: rank 1 gets ``6,7``).

On the cpu backend nothing is restricted: each rank is its own process on the host's cores.
This module imports neither vLLM nor SGLang.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

# The variables the CUDA and HIP runtimes read (HIP also honours CUDA_VISIBLE_DEVICES).
DEVICE_ENV_VARS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")

__all__ = ["DEVICE_ENV_VARS", "DeviceAssignmentError", "rank_devices", "visible_devices_env"]


class DeviceAssignmentError(ValueError):
    """A data-parallel rank's devices are not among those the user made visible."""


def rank_devices(rank: int, per_rank: int, first: int = 0, step: int = 1) -> list[int]:
    """The logical devices of data-parallel rank ``rank`` when each rank drives ``per_rank``.

    ``first`` is the first device of rank 0 and ``step`` the distance between devices
    (SGLang's ``--base-gpu-id`` and ``--gpu-id-step``).
    """
    if rank < 0 or per_rank < 1 or first < 0 or step < 1:
        raise ValueError(f"bad device layout: rank {rank}, {per_rank} per rank, first {first}, step {step}")
    return [first + (rank * per_rank + i) * step for i in range(per_rank)]


def visible_devices_env(devices: Sequence[int], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child environment that lets a plugin see exactly the logical ``devices``.

    Without ``CUDA_VISIBLE_DEVICES``/``HIP_VISIBLE_DEVICES`` in ``environ`` (default: this
    process's) both are set to the device numbers; each one that is set is narrowed to its
    entries at those positions. Raises DeviceAssignmentError when a position is not there.
    """
    env = os.environ if environ is None else environ
    ids = [int(d) for d in devices]
    if not ids or min(ids) < 0:
        raise ValueError(f"no devices to make visible: {list(devices)}")
    restricted = [var for var in DEVICE_ENV_VARS if env.get(var, "").strip()]
    if not restricted:
        joined = ",".join(str(d) for d in ids)
        return {var: joined for var in DEVICE_ENV_VARS}
    out: dict[str, str] = {}
    for var in restricted:
        visible = [entry.strip() for entry in env[var].split(",") if entry.strip()]
        if max(ids) >= len(visible):
            raise DeviceAssignmentError(
                f"this data-parallel rank needs devices {ids} of {var}={env[var]!r}, which makes "
                f"{len(visible)} visible: make more devices visible, or lower the data-parallel or "
                "tensor-parallel size"
            )
        out[var] = ",".join(visible[d] for d in ids)
    return out
