"""Summarise an Nsight Compute CSV log (ncu --csv --log-file) of one decode step per kernel.

Groups the kernels by name and grid (which tells the GEMM shapes apart), prints each group's
count, total and mean time, DRAM bytes read and the bandwidth that gives, then the step's total.
Used by device-profile.sh; runs on the GPU machine's python3 with the standard library only.
"""

from __future__ import annotations

import csv
import re
import sys
from collections import OrderedDict

UNITS = {
    "ns": 1e-3,
    "us": 1.0,
    "ms": 1e3,
    "B": 1.0,
    "nsecond": 1e-3,
    "usecond": 1.0,
    "msecond": 1e3,
    "second": 1e6,
    "byte": 1.0,
    "Kbyte": 1e3,
    "Mbyte": 1e6,
    "Gbyte": 1e9,
}


def short_name(name: str) -> str:
    """Drops namespaces, argument lists and the default template arguments noise."""
    name = name.replace("(anonymous namespace)::", "")
    name = re.sub(r"\(.*\)$", "", name)
    return name.replace("__nv_bfloat16", "bf16").replace("__half", "f16")


def read_kernels(path: str) -> list[dict]:
    """One dict per profiled kernel, in launch order: name, grid, us, bytes."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise SystemExit(f"{path}: no CSV header (did ncu profile anything?)")
    kernels: OrderedDict[str, dict] = OrderedDict()
    for row in csv.DictReader(lines[start:]):
        k = kernels.setdefault(
            row["ID"],
            {
                "name": short_name(row["Kernel Name"]),
                "grid": row.get("Grid Size", ""),
                "us": 0.0,
                "bytes": 0.0,
            },
        )
        value = float(row["Metric Value"].replace(",", "") or 0)
        scale = UNITS.get(row["Metric Unit"], 1.0)
        if row["Metric Name"] == "gpu__time_duration.sum":
            k["us"] = value * scale
        elif row["Metric Name"] == "dram__bytes_read.sum":
            k["bytes"] = value * scale
    return list(kernels.values())


def main() -> None:
    kernels = read_kernels(sys.argv[1])
    groups: OrderedDict[tuple[str, str], list[dict]] = OrderedDict()
    for k in kernels:
        groups.setdefault((k["name"], k["grid"]), []).append(k)
    total_us = sum(k["us"] for k in kernels)
    total_b = sum(k["bytes"] for k in kernels)
    print(
        f"{'count':>5} {'total us':>9} {'mean us':>8} {'MB':>8} {'TB/s':>5}  kernel [grid]"
    )
    for (name, grid), ks in sorted(
        groups.items(), key=lambda g: -sum(k["us"] for k in g[1])
    ):
        us = sum(k["us"] for k in ks)
        b = sum(k["bytes"] for k in ks)
        print(
            f"{len(ks):5d} {us:9.1f} {us / len(ks):8.2f} {b / len(ks) / 1e6:8.2f} {b / us / 1e6 if us else 0:5.2f}"
            f"  {name[:90]} [{grid}]"
        )
    print(
        f"{len(kernels):5d} {total_us:9.1f} {'':8} {total_b / 1e6:8.1f} {total_b / total_us / 1e6 if total_us else 0:5.2f}"
        "  all kernels of the step"
    )


if __name__ == "__main__":
    main()
