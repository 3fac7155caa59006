"""atom_go.devices: the GPUs each data-parallel rank's atom-plugin sees (no framework needed)."""

from __future__ import annotations

import pytest

from atom_go.devices import DeviceAssignmentError, rank_devices, visible_devices_env


def test_rank_devices() -> None:
    assert rank_devices(0, 1) == [0]
    assert rank_devices(1, 1) == [1]
    assert rank_devices(1, 2) == [2, 3]
    assert rank_devices(1, 2, first=4, step=2) == [8, 10]
    with pytest.raises(ValueError, match="bad device layout"):
        rank_devices(0, 0)


def test_unrestricted_host_gets_the_device_numbers() -> None:
    assert visible_devices_env([2, 3], {}) == {"CUDA_VISIBLE_DEVICES": "2,3", "HIP_VISIBLE_DEVICES": "2,3"}


def test_a_user_restriction_is_indexed_not_replaced() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    assert visible_devices_env([2, 3], env) == {"CUDA_VISIBLE_DEVICES": "6,7"}
    env = {"HIP_VISIBLE_DEVICES": "GPU-a, GPU-b"}
    assert visible_devices_env([1], env) == {"HIP_VISIBLE_DEVICES": "GPU-b"}


def test_too_few_visible_devices_is_an_error_naming_them() -> None:
    with pytest.raises(DeviceAssignmentError, match="CUDA_VISIBLE_DEVICES='0'"):
        visible_devices_env([1], {"CUDA_VISIBLE_DEVICES": "0"})
