#!/usr/bin/env python3
"""Plot a pytest-benchmark JSON of the gpuarray benchmarks into PNGs next to it.

Usage: ``python bench/plot.py RESULT.json [MORE.json ...]``

Writes, for ``RESULT.json``:

- ``RESULT-bandwidth.png``: GB/s against size for the swept cases
  (transfers, contiguous copy, fill), one line per library, the raw driver
  call included;
- ``RESULT-ratios.png``: ratio to the raw driver call (1.0 = as fast as the
  raw call) for every bandwidth case at its largest size, one bar per library;
- ``RESULT-host.png``: host microseconds per call of the host-overhead cases.

Every figure names the device, driver, backend, mode and date; a simulator
run is stamped "simulator -- not GPU performance".  Only ``json`` and
matplotlib are used (no gpuarray import), so results can be plotted anywhere.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections import defaultdict

IMPL_ORDER = ["raw", "gpuarray", "cupy", "torch", "numba"]
COLORS = {"raw": "#444444", "gpuarray": "#d62728", "cupy": "#1f77b4", "torch": "#ff7f0e",
          "numba": "#2ca02c"}
SIM_STAMP = "simulator \u2014 not GPU performance"
SWEEPS = [("transfers", "h2d-pinned"), ("transfers", "d2h-pinned"),
          ("transfers", "h2d-pageable"), ("transfers", "d2h-pageable"),
          ("copy", "copy"), ("fill", "fill 4B")]


def fmt_bytes(n: float) -> str:
    for unit, step in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= step:
            v = n / step
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{int(n)} B"


def load(path: str) -> tuple[dict, list[dict]]:
    with open(path) as f:
        data = json.load(f)
    rows = [b for b in data.get("benchmarks", []) if b.get("extra_info", {}).get("suite")]
    return data, rows


def header(data: dict, rows: list[dict]) -> tuple[str, bool]:
    info = data.get("machine_info", {}).get("gpuarray", {})
    first = rows[0]["extra_info"] if rows else {}
    sim = bool(info.get("simulator", first.get("simulator", False)))
    device = info.get("device", first.get("device", "?"))
    driver = info.get("driver", first.get("driver", "?"))
    backend = info.get("backend", first.get("backend", "?"))
    mode = info.get("mode", first.get("mode", "?"))
    date = str(data.get("datetime", ""))[:19].replace("T", " ")
    text = f"{device} | driver {driver} | backend {backend}, {mode} mode | {date} UTC"
    if sim:
        text = f"{SIM_STAMP}\n{text}"
    return text, sim


def stamp(fig, title: str, sim: bool) -> None:
    fig.suptitle(title, fontsize=9, color="#b00000" if sim else "black")
    if sim:
        fig.text(0.5, 0.5, SIM_STAMP, fontsize=26, color="#b00000", alpha=0.18,
                 ha="center", va="center", rotation=25, transform=fig.transFigure)


def impls_of(rows: list[dict]) -> list[str]:
    present = {r["extra_info"]["impl"] for r in rows}
    return [i for i in IMPL_ORDER if i in present] + sorted(present - set(IMPL_ORDER))


def plot_bandwidth(plt, rows, title, sim, out) -> bool:
    bw = [r for r in rows if r["extra_info"].get("gbps") is not None]
    panels = []
    for suite, case in SWEEPS:
        sel = [r for r in bw if r["extra_info"]["suite"] == suite and r["extra_info"]["case"] == case]
        if len({r["extra_info"]["size"] for r in sel}) >= 2:
            panels.append((f"{suite}: {case}", sel))
    if not panels:
        return False
    cols = 2 if len(panels) > 1 else 1
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6 * cols, 3.6 * nrows + 0.8), squeeze=False)
    for ax, (name, sel) in zip(axes.flat, panels, strict=False):
        for impl in impls_of(sel):
            pts = sorted((r["extra_info"]["size"], r["extra_info"]["gbps"])
                         for r in sel if r["extra_info"]["impl"] == impl)
            label = impl if impl != "raw" else "raw driver call"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3,
                    color=COLORS.get(impl), label=label,
                    linestyle="--" if impl == "raw" else "-")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ticks = sorted({r["extra_info"]["size"] for r in sel})
        ax.set_xticks(ticks)
        ax.set_xticklabels([fmt_bytes(t) for t in ticks], rotation=45, fontsize=7)
        ax.set_ylabel("GB/s" + (" (simulated, meaningless)" if sim else ""), fontsize=8)
        ax.set_title(name, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    stamp(fig, title, sim)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def plot_ratios(plt, rows, title, sim, out) -> bool:
    bw = [r for r in rows if r["extra_info"].get("ratio") is not None]
    if not bw:
        return False
    # one group per (suite, case) at its largest size
    largest: dict[tuple[str, str], int] = {}
    for r in bw:
        e = r["extra_info"]
        key = (e["suite"], e["case"])
        largest[key] = max(largest.get(key, 0), e["size"])
    groups: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for r in bw:
        e = r["extra_info"]
        if e["size"] == largest[(e["suite"], e["case"])]:
            groups[(e["suite"], e["case"])][e["impl"]] = e["ratio"]
    keys = list(groups)
    impls = impls_of(bw)
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(keys) * max(1, len(impls) / 2.5) + 1.6))
    height = 0.8 / len(impls)
    for j, impl in enumerate(impls):
        ys = [i + (j - (len(impls) - 1) / 2) * height for i in range(len(keys))]
        xs = [groups[k].get(impl, float("nan")) for k in keys]
        ax.barh(ys, xs, height=height, color=COLORS.get(impl), label=impl)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels([f"{c} ({fmt_bytes(largest[(s, c)])})" for s, c in keys], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ratio to the raw driver call in the same process (higher is faster)"
                  + (" -- simulator: meaningless" if sim else ""), fontsize=8)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    stamp(fig, title, sim)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def plot_host(plt, rows, title, sim, out) -> bool:
    hs = [r for r in rows if r["extra_info"].get("suite") == "host" and "host_us" in r["extra_info"]]
    if not hs:
        return False
    groups: dict[str, dict[str, float]] = defaultdict(dict)
    for r in hs:
        e = r["extra_info"]
        key = e["case"] + (f" {fmt_bytes(e['size'])}" if e.get("size") else "")
        groups[key][e["impl"]] = e["host_us"]["median"]
    keys = list(groups)
    impls = impls_of(hs)
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(keys) * max(1, len(impls) / 2.5) + 1.6))
    height = 0.8 / len(impls)
    for j, impl in enumerate(impls):
        ys = [i + (j - (len(impls) - 1) / 2) * height for i in range(len(keys))]
        xs = [groups[k].get(impl, float("nan")) for k in keys]
        ax.barh(ys, xs, height=height, color=COLORS.get(impl), label=impl)
    ax.set_xscale("log")
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels(keys, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("host microseconds per call (median, log scale)"
                  + (" -- simulator host overheads" if sim else ""), fontsize=8)
    ax.grid(True, axis="x", which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    stamp(fig, title, sim)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def plot_file(path: str) -> list[str] | None:
    """Write the PNGs for one JSON; return their paths (None: the file holds no benchmark)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data, rows = load(path)
    if not rows:
        others = [b.get("name", "?") for b in data.get("benchmarks", [])]
        if others:  # rows that are tables, not plots (e.g. make bench-cudapy's simulator rows)
            print(f"plot: {path}: nothing to plot in {', '.join(others)} (their table is in the "
                  "run's output)")
            return []
        print(f"plot: {path} has no benchmark rows (was it run with --benchmark-disable?)",
              file=sys.stderr)
        return None
    title, sim = header(data, rows)
    stem = os.path.splitext(path)[0]
    written = []
    for suffix, fn in (("bandwidth", plot_bandwidth), ("ratios", plot_ratios), ("host", plot_host)):
        out = f"{stem}-{suffix}.png"
        if fn(plt, rows, title, sim, out):
            written.append(out)
    return written


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plot: matplotlib is not installed (pip install 'gpuarray[bench]')", file=sys.stderr)
        return 1
    status = 0
    for path in argv:
        written = plot_file(path)
        if written is None:
            status = 1
        for w in written or ():
            print(f"plot: wrote {w}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
