#!/usr/bin/env python3
"""Write the Markdown report of a ``make gpu-check`` run, for docs/validation.md.

Usage: ``tools/gpu_check/run.py`` (what ``make gpu-check`` runs) calls ::

    tools/gpu_check/report.py --steps F.steps.json --log F.log --env F.env.txt
                       --junit F.junit.xml --bench-json F.bench.json --out F.md --summary

and the older form, one test log and its exit status, still works::

    tools/gpu_check/report.py --env F --tests-log F --tests-status N
                       --bench-status N|skipped [--bench-json F] --out F.md

Everything in the report is copied or computed from those files: the date,
host, GPU and versions from the environment file; each step's status, limit
and time from the steps file; the pytest counts, failures and skip reasons
from the JUnit XML (and pytest's summary lines, quoted verbatim, from the
log); the sanitizer findings from the sanitizer steps' part of the log; the
benchmark ratios and host times from the pytest-benchmark JSON.  A value
that is not in the files is shown as "--", never guessed.  ``--summary``
prints the counts, failures, sanitizer summaries and ratios last, for the
end of the device tool's output.  Standard library only (it runs with the
system python3 of the GPU machine); when matplotlib is installed and
``--plots`` is given it also writes the PNGs of ``bench/plot.py`` next to
the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict

PEERS = ["raw", "gpuarray", "cupy", "torch", "numba"]
MISSING = "--"

_SUMMARY = re.compile(
    r"^=*\s*((?:\d+ (?:passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?)"
    r"(?:, )?)+)(?: in [\d.]+s.*?)?\s*=*$")
_STEP = re.compile(r"^===== gpu-check step (\w+)")
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?)")


_ENV_KEYS = {"commit": "commit", "stand-in": "standin", "CUDA driver": "cuda_driver",
             "NVRTC": "nvrtc", "gpuarray device": "gpuarray_device",
             "compute-sanitizer": "sanitizer"}


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
        elif ln.split(":", 1)[0] in _ENV_KEYS:
            key, value = ln.split(":", 1)
            env[_ENV_KEYS[key]] = value.strip()
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
        for i in ("gpuarray", "raw"):
            r = g.get(i)
            cells.append(MISSING if r is None else num(r.get("driver_calls"), ".2f"))
        cells.append(next(iter(g.values())).get("target", ""))
        lines.append(cells)
    return (["### Host overheads", "", "Microseconds of host time per call (median), and the "
             "driver calls per call of gpuarray and of the raw path.", ""]
            + table(["case", "size"] + [f"{i} us" for i in impls]
                    + ["gpuarray driver calls", "raw driver calls", "target"], lines))


def managers_table(rows: list[dict]) -> list[str]:
    """The memory-manager rows (``bench/test_memory_managers.py``): host us and driver calls."""
    ms = [m for r in rows if r.get("suite") == "managers" for m in r.get("rows", [])]
    if not ms:
        return []
    lines = []
    for m in ms:
        which = ", ".join(f"{k} {v:.2f}" for k, v in m.get("by_call", {}).items() if v >= 0.005)
        lines.append([m["case"], m["manager"], num(m.get("host_us"), ".2f"),
                      num(m.get("calls"), ".2f"), which])
    return (["### Memory managers", "",
             "The NBEP 7 default (cuMemAlloc + deferred cuMemFree) against the stream-ordered "
             "pool (cuMemAllocAsync): host microseconds and driver calls per operation "
             "(medians of interleaved rounds). The faster manager on this GPU, without more "
             "driver calls, is the one docs/guide/memory.rst recommends as the default.", ""]
            + table(["case", "manager", "host us", "driver calls", "of which"], lines))


def plots(bench_json: str | None) -> list[str]:
    """Make the PNGs with bench/plot.py when matplotlib is there; say what happened."""
    if not bench_json:
        return []
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return ["Plots: not made (matplotlib is not installed; run `bench/plot.py` elsewhere).", ""]
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
    try:
        import plot

        written = plot.plot_file(bench_json)
    except Exception as e:  # a plotting problem must not lose the report
        return [f"Plots: failed ({type(e).__name__}: {e}).", ""]
    return ["Plots: " + ", ".join(f"`{w}`" for w in written) + ".", ""] if written else []


# ------------------------------------------------------- steps, JUnit, log
def load_steps(path: str | None) -> list[dict]:
    if not path:
        return []
    with open(path) as f:
        return json.load(f).get("steps", [])


def split_log(text: str) -> dict[str, str]:
    """The combined log of tools/gpu_check/run.py, cut at its ``===== gpu-check step`` lines."""
    parts: dict[str, list[str]] = defaultdict(list)
    current = ""
    for ln in text.splitlines():
        m = _STEP.match(ln)
        if m:
            current = m.group(1)
        parts[current].append(ln)
    return {k: "\n".join(v) for k, v in parts.items()}


def parse_junit(path: str | None) -> dict[str, dict]:
    """Per step (testsuite name): counts, failures (id and message) and skip reasons."""
    out: dict[str, dict] = {}
    if not path:
        return out
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return out
    for suite in ([root] if root.tag == "testsuite" else root.iter("testsuite")):
        step = out.setdefault(suite.get("name", "pytest"), {
            "counts": defaultdict(int), "failures": [], "skips": defaultdict(int),
            "files": defaultdict(lambda: defaultdict(int))})
        for case in suite.iter("testcase"):
            cls, name = case.get("classname", ""), case.get("name", "")
            test_id = f"{cls.replace('.', '/')}.py::{name}" if cls.startswith("tests.") else (
                f"{cls}::{name}" if cls else name)
            tag = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
            kind = {"failure": "failed", "error": "errors", "skipped": "skipped"}.get(
                tag.tag if tag is not None else "", "passed")
            if kind == "skipped" and (tag.get("type") or "").endswith("xfail"):
                kind = "xfailed"
            step["counts"][kind] += 1
            step["files"][cls.rsplit(".", 1)[0] if "." in cls else cls][kind] += 1
            if kind in ("failed", "errors"):
                msg = (tag.get("message") or tag.text or "").strip().splitlines()
                step["failures"].append((kind, test_id, msg[0][:300] if msg else ""))
            elif kind == "skipped":
                step["skips"][(tag.get("message") or "").strip()[:300]] += 1
    return out


def sanitizer_findings(text: str) -> tuple[list[str], list[str]]:
    """compute-sanitizer's summary lines, and its first distinct findings (reports)."""
    summaries = [ln.strip() for ln in text.splitlines()
                 if re.match(r"^=+ (ERROR|RACECHECK|LEAK)[A-Z ]*SUMMARY", ln.strip())]
    seen: list[str] = []
    for ln in text.splitlines():
        ln = ln.strip()
        if re.match(r"^=+ (Invalid|Error|Warning|Race|Program hit|Uninitialized|Malloc|"
                    r"Address|Leaked|Barrier|Misaligned|Out of range)", ln) and ln not in seen:
            seen.append(ln)
    return summaries, seen[:40]


# -------------------------------------------------------------------- report
def _header(env: dict, ga: dict, sim: bool, standin: bool) -> list[str]:
    out = [f"## GPU check, {env['date']}", ""]
    if sim or standin:
        where = ("over the stand-in driver (the simulator behind the real cuda backend)"
                 if standin else "on the simulator")
        out += [f"> **This run ran {where}: it is a rehearsal, not a GPU validation; its "
                "benchmark numbers are simulator host overheads, not GPU performance.**", ""]
    out.append(f"- Commit: {env.get('commit') or MISSING}")
    if env["gpus"]:
        for i, g in enumerate(env["gpus"]):
            out.append(f"- GPU {i}: {g['name']}, compute capability {g['cc']}, {g['memory']}, "
                       f"driver {g['driver']} (nvidia-smi)")
    else:
        out.append(f"- GPU: {env['nvidia_smi'] or MISSING}")
    if env.get("gpuarray_device"):
        out.append(f"- gpuarray device: {env['gpuarray_device']}")
    if env.get("standin"):
        out.append(f"- Stand-in driver: {env['standin']}")
    out.append(f"- CUDA driver API: {env.get('cuda_driver') or MISSING}; "
               f"NVRTC: {env.get('nvrtc') or MISSING}")
    out.append(f"- Host: {env['uname']}, Python {env['python']}")
    out.append(f"- DLPack core: {env['dlpack_core'] or MISSING}")
    if env["packages"]:
        out.append("- Packages: " + ", ".join(f"{k} {v}" for k, v in env["packages"].items()))
    if ga:
        out.append(f"- gpuarray saw: {ga.get('device', MISSING)} (backend {ga.get('backend', MISSING)}, "
                   f"driver API {ga.get('driver', MISSING)}, L2 {fmt_bytes(ga.get('l2_cache_size'))}), "
                   f"benchmark mode {ga.get('mode', MISSING)}")
    out.append("")
    return out


def _counts(c: dict) -> str:
    return ", ".join(f"{c[k]} {k}" for k in ("passed", "failed", "errors", "skipped", "xfailed",
                                             "xpassed", "deselected", "warnings") if c.get(k))


def _status(e: dict) -> str:
    if e.get("skipped"):
        return f"skipped: {e['skipped']}"
    if e.get("timed_out"):
        return f"TIMED OUT at {e.get('limit_s', MISSING)} s"
    return "ok" if e.get("ok") else f"FAILED (exit {e.get('rc')})"


def steps_sections(steps: list[dict], log: dict[str, str], junit: dict[str, dict]) -> list[str]:
    """The steps table, the tests (JUnit), the README example and the sanitizers."""
    rows = [[e["name"], _status(e), num(e.get("seconds") or None, ".0f"),
             num(e.get("limit_s") or None, ".0f"), e.get("summary") or ""]
            for e in steps if e["name"] != "report"]
    out = ["### Steps", ""] + table(["step", "status", "seconds", "limit s", "pytest summary"],
                                    rows) + [""]
    tests = [n for n in ("suite", "suite1", "serial") if n in junit]
    total: dict[str, int] = defaultdict(int)
    for n in tests:
        for k, v in junit[n]["counts"].items():
            total[k] += v
    out += ["### Tests (cuda backend)", "",
            f"All pytest steps of the suite ({', '.join(tests) or 'none ran'}): "
            f"{_counts(total) or 'no results'} (from the JUnit XML).", ""]
    for n in tests:
        summary = next((e.get("summary") for e in steps if e["name"] == n), None)
        if summary:
            out.append(f"- `{n}`: `{summary}`")
    out.append("")
    fails = [f for n in junit for f in junit[n]["failures"]]
    if fails:
        out += ["Failures (every one needs a fix or a reason in docs/validation.md):", ""]
        out += [f"- [{junit_step}] {kind}: `{tid}`: {msg}" for junit_step in junit
                for kind, tid, msg in junit[junit_step]["failures"]] + [""]
    skips: dict[str, int] = defaultdict(int)
    for n in tests:
        for reason, k in junit[n]["skips"].items():
            skips[reason] += k
    if skips:
        out += ["Skips by reason:", ""]
        out += table(["count", "reason"], [[str(k), r or MISSING] for r, k in
                                           sorted(skips.items(), key=lambda t: -t[1])]) + [""]
    files: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for n in tests:
        for f, c in junit[n]["files"].items():
            for k, v in c.items():
                files[f][k] += v
    if files:
        out += ["Per test file (peer interop: test_interop_peers, test_dlpack_exchange_peers, "
                "test_numba_*, test_dask; doctests: test_docs):", ""]
        out += table(["file", "passed", "failed", "errors", "skipped"],
                     [[f, *(str(c.get(k, 0)) for k in ("passed", "failed", "errors", "skipped"))]
                      for f, c in sorted(files.items())]) + [""]
    readme = next((e for e in steps if e["name"] == "readme"), None)
    if readme is not None:
        last = [ln for ln in log.get("readme", "").splitlines() if ln.startswith("README example")]
        out += ["### README example", "", f"{_status(readme)}"
                + (f": {last[-1]}" if last else "") + ".", ""]
    out += ["### compute-sanitizer", ""]
    for tool in ("memcheck", "racecheck"):
        e = next((x for x in steps if x["name"] == tool), None)
        if e is None:
            continue
        summaries, found = sanitizer_findings(log.get(tool, ""))
        c = junit.get(tool, {}).get("counts", {})
        out.append(f"- {tool}: {_status(e)}" + (f"; tests {_counts(c)}" if c else "")
                   + (f"; `{'`, `'.join(summaries)}`" if summaries else ""))
        out += [f"  - `{ln}`" for ln in found]
    out.append("")
    return out


def report(args: argparse.Namespace) -> str:
    try:
        with open(args.env) as f:
            env = parse_env(f.read())
    except OSError:
        env = parse_env("")
    data, rows = load_bench(args.bench_json)
    ga = data.get("machine_info", {}).get("gpuarray", {})
    sim = bool(ga.get("simulator")) or any(r.get("simulator") for r in rows)
    standin = bool(env.get("standin")) or bool(ga.get("standin"))
    out = _header(env, ga, sim, standin)

    if args.steps:
        steps = load_steps(args.steps)
        out += steps_sections(steps, _read_log(args.log), parse_junit(args.junit))
        bench = next((e for e in steps if e["name"] == "bench"), {})
        bench_status = ("skipped" if bench.get("skipped") or not bench
                        else "timed out" if bench.get("timed_out") else str(bench.get("rc")))
    else:
        with open(args.tests_log, errors="replace") as f:
            tests = parse_tests_log(f.read())
        c = tests["counts"]
        out += ["### Tests",
                "",
                f"`GPUARRAY_BACKEND=cuda python3 -m pytest -m \"not slow\"`: exit status "
                f"{args.tests_status}; {_counts(c) or 'no counts found in the log'}.",
                ""]
        if tests["summary"]:
            out += [f"Summary line: `{tests['summary']}`", ""]
        if tests["failures"]:
            out += ["Failures:", ""] + [f"- `{ln}`" for ln in tests["failures"][:50]]
            if len(tests["failures"]) > 50:
                out.append(f"- ... and {len(tests['failures']) - 50} more (see the log)")
            out.append("")
        bench_status = args.bench_status

    out += ["### Benchmarks", ""]
    if bench_status == "skipped":
        out += ["Not run.", ""]
    else:
        out.append(f"`python3 -m pytest bench --benchmark-only`: exit status {bench_status}"
                   + (f"; JSON `{os.path.basename(args.bench_json)}`" if data else "; no JSON written")
                   + ".")
        out.append("")
        peers = ga.get("peers", {})
        for name, status in peers.items():
            if status != "available":
                out.append(f"- {name} not measured: {status}")
        if peers:
            out.append("")
        if args.plots or not args.steps:
            out += plots(args.bench_json if data else None)
        bt, ht, mt = bandwidth_tables(rows), host_table(rows), managers_table(rows)
        if not (bt or ht or mt):
            out += ["No benchmark results in the JSON.", ""]
        out += bt + ([""] if bt else []) + ht + ([""] if ht else []) + mt + ([""] if mt else [])
    return "\n".join(out).rstrip() + "\n"


def _read_log(path: str | None) -> dict[str, str]:
    """The run's log split by step (``split_log``); empty when there is none."""
    try:
        with open(path, errors="replace") as f:  # type: ignore[arg-type]  # None: TypeError
            return split_log(f.read())
    except (OSError, TypeError):
        return {}


def summary(args: argparse.Namespace) -> list[str]:
    """The few lines printed last: steps, counts, failures, sanitizers, ratios."""
    steps = load_steps(args.steps)
    junit = parse_junit(args.junit)
    log = _read_log(args.log)
    out = ["gpu-check summary:"]
    for e in steps:
        if e["name"] != "report":
            out.append(f"  {e['name']:<9} {_status(e)}"
                       + (f" in {e['seconds']:.0f} s" if e.get("rc") is not None else "")
                       + (f": {e['summary']}" if e.get("summary") else ""))
    fails = [(s, k, t, m) for s in junit for k, t, m in junit[s]["failures"]]
    for s, k, t, m in fails[:25]:
        out.append(f"  {s} {k}: {t}: {m[:160]}")
    if len(fails) > 25:
        out.append(f"  ... {len(fails) - 25} more failures in the report")
    for tool in ("memcheck", "racecheck"):
        summaries, found = sanitizer_findings(log.get(tool, ""))
        out += [f"  {tool}: {s}" for s in summaries] + [f"  {tool}: {ln}" for ln in found[:5]]
    _, rows = load_bench(args.bench_json)
    bw = [r for r in rows if r.get("ratio") is not None]
    if bw:
        largest: dict[tuple, int] = {}
        for r in bw:
            k = (r["suite"], r["case"])
            largest[k] = max(largest.get(k, 0), r.get("size", 0))
        out.append("  ratio to the raw call (gpuarray / cupy / torch), largest size of each case:")
        by: dict[tuple, dict] = defaultdict(dict)
        for r in bw:
            if r.get("size", 0) == largest[(r["suite"], r["case"])]:
                by[(r["suite"], r["case"], r.get("size", 0))][r["impl"]] = r["ratio"]
        for (suite, case, size), g in by.items():
            out.append(f"    {suite:<9} {case:<16} {fmt_bytes(size):>9}  "
                       + " / ".join(num(g.get(i), ".2f") for i in ("gpuarray", "cupy", "torch")))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", required=True)
    p.add_argument("--steps", help="the steps file of tools/gpu_check/run.py")
    p.add_argument("--log", help="its combined log")
    p.add_argument("--junit", help="its merged JUnit XML")
    p.add_argument("--tests-log", help="(without --steps) the test run's output")
    p.add_argument("--tests-status", help="(without --steps) its exit status")
    p.add_argument("--bench-status", help="(without --steps) N or skipped")
    p.add_argument("--bench-json")
    p.add_argument("--out", required=True)
    p.add_argument("--plots", action="store_true",
                   help="write the PNGs next to the JSON (always without --steps)")
    p.add_argument("--summary", action="store_true", help="print the summary lines last")
    args = p.parse_args(argv)
    if not args.steps and not (args.tests_log and args.tests_status and args.bench_status):
        p.error("give --steps, or --tests-log, --tests-status and --bench-status")
    if args.bench_json and not os.path.isfile(args.bench_json):
        args.bench_json = None
    text = report(args)
    with open(args.out, "w") as f:
        f.write(text)
    print(f"gpu-check: report written to {args.out}")
    if args.summary and args.steps:
        print("\n".join(summary(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
