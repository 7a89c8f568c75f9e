#!/usr/bin/env python3
"""Write the Markdown report of a ``make gpu-check`` run, for docs/validation.md.

Usage (the Makefile's call)::

    bench/gpu_check.py --env F --tests-log F --tests-status N
                       --bench-status N|skipped [--bench-json F] --out F.md

Everything in the report is copied or computed from those files: the date,
host, GPU and versions from the environment file; the pytest counts from the
summary line of the test log (quoted verbatim) and its FAILED/ERROR lines;
the benchmark ratios and host times from the pytest-benchmark JSON.  A value
that is not in the files is shown as "--", never guessed.  Standard library
only (it runs with the system python3 of the GPU machine); when matplotlib is
installed it also writes the PNGs of ``bench/plot.py`` next to the JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict

PEERS = ["raw", "gpuarray", "cupy", "torch", "numba"]
MISSING = "--"

_SUMMARY = re.compile(
    r"^=*\s*((?:\d+ (?:passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?)"
    r"(?:, )?)+)(?: in [\d.]+s.*?)?\s*=*$")
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?)")


# -------------------------------------------------------------------- inputs
def parse_env(text: str) -> dict:
    """The environment file the Makefile writes: date, uname, python, DLPack core, nvidia-smi, packages."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    env: dict = {"date": lines[0] if lines else MISSING, "uname": MISSING, "python": MISSING,
                 "gpus": [], "nvidia_smi": None, "packages": {}, "dlpack_core": None}
    for ln in lines[1:]:
        if ln.startswith("DLPack core:"):
            env["dlpack_core"] = ln.split(":", 1)[1].strip()
        elif ln.startswith("Python "):
            env["python"] = ln.split(None, 1)[1]
        elif ln.startswith("nvidia-smi:"):
            env["nvidia_smi"] = ln
        elif ln.endswith(": not installed"):
            env["packages"][ln[: -len(": not installed")]] = "not installed"
        elif ln.count(",") == 3:
            name, driver, mem, cc = (p.strip() for p in ln.split(","))
            env["gpus"].append({"name": name, "driver": driver, "memory": mem, "cc": cc})
        elif re.fullmatch(r"[A-Za-z0-9_.\-]+ \S+", ln) and env["uname"] != MISSING:
            pkg, ver = ln.split()
            env["packages"][pkg] = ver
        elif env["uname"] == MISSING:
            env["uname"] = ln
    return env


def parse_tests_log(text: str) -> dict:
    """pytest's final summary line, its counts, and the FAILED/ERROR lines."""
    summary, counts = None, {}
    for ln in text.splitlines():
        m = _SUMMARY.match(ln.strip())
        if m:
            summary = ln.strip()
            counts = {}
            for n, what in _COUNT.findall(m.group(1)):
                key = {"error": "errors", "warning": "warnings"}.get(what, what)
                counts[key] = int(n)
    if summary is None and "no tests ran" in text:
        summary = next(ln.strip() for ln in reversed(text.splitlines()) if "no tests ran" in ln)
    failures = [ln.strip() for ln in text.splitlines()
                if ln.startswith(("FAILED ", "ERROR "))]
    return {"summary": summary, "counts": counts, "failures": failures}


def load_bench(path: str | None) -> tuple[dict, list[dict]]:
    if not path:
        return {}, []
    with open(path) as f:
        data = json.load(f)
    rows = [b["extra_info"] for b in data.get("benchmarks", [])
            if b.get("extra_info", {}).get("suite")]
    return data, rows


# ---------------------------------------------------------------- formatting
def fmt_bytes(n) -> str:
    if not isinstance(n, (int, float)) or n <= 0:
        return MISSING
    for unit, step in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= step:
            v = n / step
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{int(n)} B"


def num(x, fmt: str) -> str:
    return MISSING if x is None else format(x, fmt)


def table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return out


def bandwidth_tables(rows: list[dict]) -> list[str]:
    bw = [r for r in rows if r.get("ratio") is not None or r.get("gbps") is not None]
    if not bw:
        return []
    groups: dict[tuple, dict[str, dict]] = defaultdict(dict)
    order: list[tuple] = []
    for r in bw:
        key = (r["suite"], r["case"], r.get("size", 0))
        if key not in groups:
            order.append(key)
        groups[key][r["impl"]] = r
    impls = [i for i in PEERS if any(i in g for g in groups.values())]
    largest: dict[tuple, int] = {}
    for s, c, n in order:
        largest[(s, c)] = max(largest.get((s, c), 0), n)

    def line(key):
        g = groups[key]
        any_row = next(iter(g.values()))
        base = any_row.get("baseline", {})
        l2 = any_row.get("l2_multiple")
        size = fmt_bytes(key[2]) + (f" ({l2:.1f}x L2)" if isinstance(l2, (int, float)) and l2 >= 0.1
                                    else "")
        cells = [key[0], key[1], size, base.get("call", MISSING),
                 num(base.get("gbps"), ".3g")]
        for i in impls:
            r = g.get(i)
            cells.append(MISSING if r is None else
                         f"{num(r.get('ratio'), '.2f')} ({num(r.get('gbps'), '.3g')} GB/s)")
        cells.append(any_row.get("target", "") or "")
        return cells

    head = ["suite", "case", "size", "raw call (ratio 1.00)", "raw GB/s"] + impls + ["target"]
    out = ["### Bandwidth at the target sizes",
           "",
           "Ratio to the raw driver call measured in the same process (higher is faster; "
           "GPU time from CUDA events, median), with GB/s in brackets.  The `raw` column "
           "re-measures the raw call: its distance from 1.00 is the run's noise.  PERF.md "
           "wants buffers of at least 4x the L2 cache at the target sizes.",
           ""]
    out += table(head, [line(k) for k in order if k[2] == largest[(k[0], k[1])]])
    smaller = [k for k in order if k[2] != largest[(k[0], k[1])]]
    if smaller:
        out += ["", "### Bandwidth at the other sizes of the sweeps", ""]
        out += table(head, [line(k) for k in smaller])
    return out


def host_table(rows: list[dict]) -> list[str]:
    hs = [r for r in rows if r.get("suite") == "host" and "host_us" in r]
    if not hs:
        return []
    groups: dict[tuple, dict[str, dict]] = defaultdict(dict)
    order: list[tuple] = []
    for r in hs:
        key = (r["case"], r.get("size", 0))
        if key not in groups:
            order.append(key)
        groups[key][r["impl"]] = r
    impls = [i for i in PEERS if any(i in g for g in groups.values())]
    lines = []
    for key in order:
        g = groups[key]
        cells = [key[0], fmt_bytes(key[1]) if key[1] else ""]
        for i in impls:
            r = g.get(i)
            cells.append(MISSING if r is None else num(r["host_us"].get("median"), ".2f"))
        cells.append(next(iter(g.values())).get("target", ""))
        lines.append(cells)
    return (["### Host overheads", "", "Microseconds of host time per call (median).", ""]
            + table(["case", "size"] + [f"{i} us" for i in impls] + ["target"], lines))


def plots(bench_json: str | None) -> list[str]:
    """Make the PNGs with bench/plot.py when matplotlib is there; say what happened."""
    if not bench_json:
        return []
    import importlib.util
    import os

    if importlib.util.find_spec("matplotlib") is None:
        return ["Plots: not made (matplotlib is not installed; run `bench/plot.py` elsewhere).", ""]
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        import plot

        written = plot.plot_file(bench_json)
    except Exception as e:  # a plotting problem must not lose the report
        return [f"Plots: failed ({type(e).__name__}: {e}).", ""]
    return ["Plots: " + ", ".join(f"`{w}`" for w in written) + ".", ""] if written else []


# -------------------------------------------------------------------- report
def report(args: argparse.Namespace) -> str:
    with open(args.env) as f:
        env = parse_env(f.read())
    with open(args.tests_log, errors="replace") as f:
        tests = parse_tests_log(f.read())
    data, rows = load_bench(args.bench_json)
    ga = data.get("machine_info", {}).get("gpuarray", {})
    sim = bool(ga.get("simulator")) or any(r.get("simulator") for r in rows)

    out = [f"## GPU check, {env['date']}", ""]
    if sim:
        out += ["> **The benchmarks of this report ran on the simulator: their numbers are "
                "simulator host overheads, not GPU performance.**", ""]
    if env["gpus"]:
        for i, g in enumerate(env["gpus"]):
            out.append(f"- GPU {i}: {g['name']}, compute capability {g['cc']}, {g['memory']}, "
                       f"driver {g['driver']} (nvidia-smi)")
    else:
        out.append(f"- GPU: {env['nvidia_smi'] or MISSING}")
    out.append(f"- Host: {env['uname']}, Python {env['python']}")
    out.append(f"- DLPack core: {env['dlpack_core'] or MISSING}")
    if env["packages"]:
        out.append("- Packages: " + ", ".join(f"{k} {v}" for k, v in env["packages"].items()))
    if ga:
        out.append(f"- gpuarray saw: {ga.get('device', MISSING)} (backend {ga.get('backend', MISSING)}, "
                   f"driver API {ga.get('driver', MISSING)}, L2 {fmt_bytes(ga.get('l2_cache_size'))}), "
                   f"benchmark mode {ga.get('mode', MISSING)}")
    out.append("")

    c = tests["counts"]
    counts = ", ".join(f"{c[k]} {k}" for k in ("passed", "failed", "errors", "skipped", "xfailed",
                                                 "xpassed", "deselected", "warnings") if k in c)
    out += ["### Tests",
            "",
            f"`GPUARRAY_BACKEND=cuda python3 -m pytest -m \"not slow\"`: exit status "
            f"{args.tests_status}; {counts or 'no counts found in the log'}.",
            ""]
    if tests["summary"]:
        out += [f"Summary line: `{tests['summary']}`", ""]
    if tests["failures"]:
        out += ["Failures:", ""] + [f"- `{ln}`" for ln in tests["failures"][:50]]
        if len(tests["failures"]) > 50:
            out.append(f"- ... and {len(tests['failures']) - 50} more (see the log)")
        out.append("")

    out += ["### Benchmarks", ""]
    if args.bench_status == "skipped":
        out += ["Not run (no benchmark files).", ""]
    else:
        out.append(f"`python3 -m pytest bench --benchmark-only`: exit status {args.bench_status}"
                   + (f"; JSON `{args.bench_json}`" if args.bench_json else "; no JSON written")
                   + ".")
        out.append("")
        peers = ga.get("peers", {})
        for name, status in peers.items():
            if status != "available":
                out.append(f"- {name} not measured: {status}")
        if peers:
            out.append("")
        out += plots(args.bench_json)
        bt, ht = bandwidth_tables(rows), host_table(rows)
        if not (bt or ht):
            out += ["No benchmark results in the JSON.", ""]
        out += bt + ([""] if bt else []) + ht + ([""] if ht else [])
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", required=True)
    p.add_argument("--tests-log", required=True)
    p.add_argument("--tests-status", required=True)
    p.add_argument("--bench-status", required=True)
    p.add_argument("--bench-json")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    text = report(args)
    with open(args.out, "w") as f:
        f.write(text)
    print(f"gpu-check: report written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
