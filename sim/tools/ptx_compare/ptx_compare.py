#!/usr/bin/env python3
"""``ptx-vs-gpu`` (issue 34): the simulator's PTX executor against a GPU, bit for bit.

Each program of sim/tools/ptx_compare/ptx_programs.py (the per-instruction
programs of sim/tests/ptx/test_ptx_ops.py, numba-cuda's PTX fixtures, ``kernels/`` as
NVRTC's PTX, saxpy) is launched with the same seeded inputs on two sides:

``device``     gpuarray's process-wide backend: on the GPU machine the cuda
               backend (``cuModuleLoadData`` of the same PTX text, the driver
               JIT-compiles it; ``cuLaunchKernel``); over the stand-in driver
               the simulator behind it (a rehearsal, said so in the report);
``simulator``  a fresh ``SimBackend`` in the same process: the PTX executor
               (``sim/gpuarray_sim/ptx``), built with the host compiler
               (the GPU machine has one: nvcc needs it, and the ``build``
               step compiles the C DLPack core with it).

``--rehearse`` makes the device side a second ``SimBackend`` (no driver at
all): the whole comparison runs here, and every program must be equal.

Every output buffer is compared bit for bit.  A program is ``equal``, a
``finding``, or ``DIFFERS``.  A difference is a finding when it is in a class
the executor's docstring lists as unknown until a GPU run: the program uses
an ``.approx`` function; a float ``add``/``sub``/``mul``/``mad`` without a
rounding modifier (ptxas may fuse it into an fma); f16 ``fma`` or bf16
``add``/``sub``/``fma`` (the executor may round twice); or every differing
element is a NaN on both sides (payloads).  Any other difference, or a launch
that fails on one side only, fails the step (exit 1).  The report lists per
program: status, elements compared, how many differ, the largest ulp
distance, the first differing index and both values; ``--json`` writes it.

Over 90 programs: the simulator's C++ builds (one per module) run first on
``--jobs`` threads; the GPU's JIT is milliseconds.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ptx_programs  # noqa: E402  (beside this file; the tools folder is no package)

LEGACY = 1  # CU_STREAM_LEGACY

#: The documented unknown classes (sim/gpuarray_sim/ptx/__init__.py, "Numerics"):
#: a difference in a program whose text matches one is a finding, not a failure.
UNKNOWN_CLASSES = {
    "approx": re.compile(r"\.approx\b"),
    "unfused add/mul": re.compile(r"\b(add|sub|mul|mad)(\.ftz)?(\.sat)?\.f(32|64)\b"),
    "f16 fma / bf16 double rounding": re.compile(
        r"\bfma\.rn(\.ftz)?(\.sat)?\.f16(x2)?\b|\b(add|sub|fma)(\.rn)?(\.ftz)?(\.sat)?\.bf16"),
}


def unknown_classes(text: str) -> list[str]:
    """The documented unknown classes ``text`` (PTX) has instructions of."""
    return [name for name, pat in UNKNOWN_CLASSES.items() if pat.search(text)]


# ---------------------------------------------------------------- the sides
class Side:
    """One backend that runs programs: buffers in, launches, buffers out."""

    def __init__(self, name: str, backend: Any) -> None:
        self.name, self.b = name, backend
        backend.init()
        backend.ctx_set_current(backend.primary_ctx_retain(0))
        self._modules: dict[str, int] = {}

    def module(self, text: str) -> int:
        m = self._modules.get(text)
        if m is None:
            m = self._modules[text] = self.b.module_load_data(text.encode() + b"\0")
        return m

    def run(self, prog: ptx_programs.Program) -> list[np.ndarray]:
        b = self.b
        ptrs = []
        try:
            for buf in prog.bufs:
                data = np.ascontiguousarray(buf.data)
                d = b.mem_alloc(max(data.nbytes, 1))
                ptrs.append(d)
                if data.nbytes:
                    b.memcpy_htod_async(d, data.ctypes.data, data.nbytes, LEGACY)
            mod = self.module(prog.ptx)
            for entry, grid, block, shared, params in prog.launches(ptrs):
                f = b.module_get_function(mod, entry)
                b.launch_kernel(f, grid, block, shared, LEGACY, params)
            b.ctx_synchronize()
            outs = []
            for buf, d in zip(prog.bufs, ptrs, strict=True):
                if buf.out:
                    got = np.empty_like(np.ascontiguousarray(buf.data))
                    if got.nbytes:
                        b.memcpy_dtoh_async(got.ctypes.data, d, got.nbytes, LEGACY)
                    outs.append(got)
            b.ctx_synchronize()
            return outs
        finally:
            for d in ptrs:
                try:
                    b.mem_free(d)
                except Exception:
                    pass


def prebuild(progs: list[ptx_programs.Program], jobs: int) -> float:
    """Translate and build each module of ``progs`` for the simulator, ``jobs`` at a time."""
    from gpuarray_sim import ptx

    t0 = time.monotonic()
    texts = list(dict.fromkeys(p.ptx for p in progs))

    def one(text: str) -> None:
        try:
            ptx.load(text).build()
        except Exception:
            pass  # the launch reports it, on its program's line

    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        list(pool.map(one, texts))
    return time.monotonic() - t0


UNSUPPORTED_PTX_VERSION = 222
#: ``.version`` numbers tried, newest first, when the device refuses a module's own
#: (a driver JIT-compiles the PTX ISA of its CUDA version and older: CUDA 13.0 reads 9.0)
VERSIONS = ("9.0", "8.8", "8.7", "8.5", "8.4", "8.3", "8.2", "8.1", "8.0", "7.8")
_VERSION = re.compile(r"^\.version\s+(\S+)", re.M)


def _loads(side: Side, text: str) -> BaseException | None:
    try:
        side.module(text)
        return None
    except Exception as e:
        return e


def settle(device: Side, progs: list[ptx_programs.Program]) -> list[str]:
    """Make each program's PTX one the device loads, the same text for both sides.

    A ``.version`` the device's driver is too old for (222) is lowered to the
    newest it reads; an ``ops:*`` module the device refuses (one entry it does
    not assemble refuses them all) is split: the entries it loads alone share
    one module again, each refused one keeps its own, so its program reports
    the device's refusal.  Returns what was changed, for the report.
    """
    notes: list[str] = []
    lowered_to: dict[str, int] = {}
    for text in list(dict.fromkeys(p.ptx for p in progs)):
        users = [p for p in progs if p.ptx == text]
        err = _loads(device, text)
        if err is not None and getattr(err, "code", None) == UNSUPPORTED_PTX_VERSION:
            m = _VERSION.search(text)
            for v in VERSIONS:
                lowered = _VERSION.sub(f".version {v}", text, count=1)
                if m and m.group(1) != v and _loads(device, lowered) is None:
                    for p in users:
                        p.ptx = lowered
                        p.note = "; ".join(x for x in (p.note, f".version {m.group(1)} "
                                                       f"lowered to {v} (the device's "
                                                       "driver refuses it: 222)") if x)
                    lowered_to[f".version {m.group(1)} -> {v}"] = (
                        lowered_to.get(f".version {m.group(1)} -> {v}", 0) + 1)
                    err = None
                    break
        if err is None or not all(p.alone for p in users):
            continue
        keep = [p for p in users if _loads(device, p.alone or "") is None]
        refused = [p for p in users if p not in keep]
        shared = keep[0].head + "\n".join(
            (p.alone or "")[len(p.head):] for p in keep) if keep else ""
        for p in keep:
            p.ptx = shared
        for p in refused:
            p.ptx = p.alone or p.ptx
            p.note = "the device refuses this entry's PTX: it runs as a module of its own"
        notes.append(f"the device refuses {len(refused)} of {len(users)} entries of a shared "
                     f"module ({', '.join(p.name for p in refused)}): they run alone")
    return [f"{k} in {n} module(s): the device's driver refuses the newer (222)"
            for k, n in lowered_to.items()] + notes


# ------------------------------------------------------------- comparison
def _ordered(bits: np.ndarray, width: int) -> np.ndarray:
    """Float bit patterns as integers in the floats' order (ulp distance = difference)."""
    b = bits.astype(np.int64) if width < 64 else bits.view(np.int64)
    sign = np.int64(1) << np.int64(width - 1)
    if width < 64:
        neg = (b & sign) != 0
        return np.where(neg, -(b & (sign - 1)), b)
    neg = b < 0
    return np.where(neg, -(b & np.int64(0x7FFFFFFFFFFFFFFF)), b)


def _value(a: np.ndarray, i: int) -> str:
    v = a.reshape(-1)[i]
    bits = a.reshape(-1).view(f"u{a.itemsize}")[i] if a.dtype.kind in "fiub" else None
    hexs = f" (0x{int(bits):0{2 * a.itemsize}x})" if bits is not None else ""
    return f"{v!r}{hexs}"


EXAMPLES = 16  # differing elements recorded per buffer, with the inputs at their index


def _examples(idx: np.ndarray, d: np.ndarray, s: np.ndarray,
              inputs: list[np.ndarray] | None) -> list[dict]:
    """The first differing elements: index, both values, and each input at that index.

    A finding becomes a rule of the executor only with the inputs that made it
    (the first GPU run recorded the first difference alone).
    """
    out = []
    for i in idx[:EXAMPLES].tolist():
        ex: dict[str, Any] = {"index": i, "device": _value(d, i), "simulator": _value(s, i)}
        if inputs:
            ex["inputs"] = [_value(x.reshape(-1), i) for x in inputs
                            if x.size == d.size and x.dtype.kind in "fiub"]
        out.append(ex)
    return out


def compare(name: str, dev: np.ndarray, sim: np.ndarray, skip: list[int] | None = None,
            inputs: list[np.ndarray] | None = None) -> dict:
    """One output buffer, bit for bit: counts, ulp distance, the differing elements."""
    d, s = dev.reshape(-1), sim.reshape(-1)
    width = 8 * d.itemsize
    db, sb = d.view(f"u{d.itemsize}"), s.view(f"u{s.itemsize}")
    diff = db != sb
    if skip:
        diff[np.asarray(skip)] = False
    n = int(diff.sum())
    res: dict[str, Any] = {"buffer": name, "dtype": str(d.dtype), "elements": int(d.size),
                           "compared": int(d.size - len(skip or [])), "differ": n,
                           "nan_payload_only": False, "max_ulp": 0}
    if not n:
        return res
    idx = np.flatnonzero(diff)
    i = int(idx[0])
    res.update(first_index=i, device=_value(d, i), simulator=_value(s, i),
               examples=_examples(idx, d, s, inputs))
    if d.dtype.kind == "f":
        both_nan = np.isnan(d[idx]) & np.isnan(s[idx])
        res["nan_payload_only"] = bool(both_nan.all())
        num = idx[~(np.isnan(d[idx]) | np.isnan(s[idx]))]
        if num.size:
            du = _ordered(db[num], width)
            su = _ordered(sb[num], width)
            res["max_ulp"] = int(np.abs(du - su).max())
        res["nan_mismatch"] = int((np.isnan(d[idx]) != np.isnan(s[idx])).sum())
    else:
        res["max_ulp"] = None
        res["max_abs_diff"] = int(np.abs(d[idx].astype(object) - s[idx].astype(object)).max())
    return res


def judge(prog: ptx_programs.Program, dev: Any, sim: Any) -> dict:
    """The program's entry of the report (``dev``/``sim``: output lists or error strings)."""
    classes = unknown_classes(prog.classify_text or prog.ptx)
    entry: dict[str, Any] = {"program": prog.name, "unknown_classes": classes}
    if prog.note:
        entry["note"] = prog.note
    if isinstance(dev, str) or isinstance(sim, str):
        entry.update(status="DIFFERS", device_error=dev if isinstance(dev, str) else None,
                     simulator_error=sim if isinstance(sim, str) else None, buffers=[])
        if isinstance(dev, str) and isinstance(sim, str) and _code(dev) == _code(sim):
            entry["status"] = "equal"  # both refuse it with the same code
        return entry
    skip = ptx_programs.ORDER_DEPENDENT.get(prog.name)
    inputs = [np.ascontiguousarray(b.data) for b in prog.bufs if not b.out]
    bufs = [compare(f"out{k}", a, b, skip, inputs)
            for k, (a, b) in enumerate(zip(dev, sim, strict=True))]
    entry["buffers"] = bufs
    differing = [b for b in bufs if b["differ"]]
    if not differing:
        entry["status"] = "equal"
    elif classes or all(b["nan_payload_only"] for b in differing):
        entry["status"] = "finding"
        if not classes:
            entry["unknown_classes"] = ["NaN payload"]
    else:
        entry["status"] = "DIFFERS"
    return entry


def _code(err: str) -> str:
    """``CudaError 218`` of ``CudaError 218: ...`` (the whole text for other errors)."""
    return err.split(":", 1)[0]


def _attempt(side: Side, prog: ptx_programs.Program) -> Any:
    try:
        return side.run(prog)
    except Exception as e:
        code = getattr(e, "code", None)
        return f"{type(e).__name__}{f' {code}' if code is not None else ''}: {str(e)[:300]}"


# ------------------------------------------------------------------ report
def line(entry: dict) -> str:
    """One report line of a program."""
    head = f"{entry['status']:8} {entry['program']}"
    if entry.get("device_error") or entry.get("simulator_error"):
        return (f"{head}: device: {entry.get('device_error') or 'ran'}; "
                f"simulator: {entry.get('simulator_error') or 'ran'}"
                + (f" [{entry['note']}]" if entry.get("note") else ""))
    n = sum(b["compared"] for b in entry["buffers"])
    parts = [f"{n} elements"]
    for b in entry["buffers"]:
        if b["differ"]:
            ulp = (f", max {b['max_ulp']} ulp" if b["max_ulp"] is not None
                   else f", max |diff| {b.get('max_abs_diff')}")
            parts.append(f"{b['buffer']} ({b['dtype']}): {b['differ']} differ{ulp}, first at "
                         f"[{b['first_index']}]: device {b['device']} simulator {b['simulator']}")
    if entry["status"] != "equal" and entry["unknown_classes"]:
        parts.append("class: " + ", ".join(entry["unknown_classes"]))
    return f"{head}: " + "; ".join(parts) + (f" [{entry['note']}]" if entry.get("note") else "")


class PtxasGate:
    """A simulator that loads only the PTX the CUDA toolkit's ``ptxas`` assembles for sm_90.

    The rehearsal's stand-in for a GPU's JIT: a ``.version`` ptxas does not
    read is 222, any other refusal 218, with ptxas's first error line.
    """

    def __init__(self, backend: Any, ptxas: str) -> None:
        self._b, self.ptxas = backend, ptxas

    def __getattr__(self, name: str) -> Any:
        return getattr(self._b, name)

    def module_load_data(self, image: bytes) -> int:
        import subprocess
        import tempfile

        from gpuarray.errors import CudaError

        with tempfile.TemporaryDirectory() as d:
            src = Path(d, "m.ptx")
            src.write_bytes(bytes(image).split(b"\0", 1)[0])
            p = subprocess.run([self.ptxas, "-arch=sm_90", str(src), "-o", str(Path(d, "m.o"))],
                               capture_output=True, text=True, timeout=120)
        if p.returncode:
            first = next((ln for ln in p.stderr.splitlines() if "rror" in ln or "fatal" in ln),
                         p.stderr.strip()[:200])
            code = UNSUPPORTED_PTX_VERSION if "Unsupported .version" in p.stderr else 218
            raise CudaError(code, "cuModuleLoadData", f"ptxas: {first.split(';', 1)[-1].strip()}")
        return int(self._b.module_load_data(image))


def find_ptxas() -> str | None:
    """The CUDA toolkit's ptxas (PATH, then /usr/local/cuda*/bin)."""
    import glob
    import shutil

    found = shutil.which("ptxas")
    if found:
        return found
    return next(iter(sorted(glob.glob("/usr/local/cuda*/bin/ptxas"))), None)


def device_side(rehearse: bool, ptxas: str | None = None) -> tuple[Side, str]:
    """The device side, and what it is in words."""
    from gpuarray_sim import SimBackend

    from gpuarray import _driver

    if rehearse and ptxas:
        return (Side("device", PtxasGate(SimBackend(), ptxas)),
                f"a second simulator loading what {ptxas} assembles (--rehearse --ptxas)")
    if rehearse:
        return Side("device", SimBackend()), "a second simulator (--rehearse)"
    what = _driver.backend_name()
    if os.environ.get("GPUARRAY_STANDIN", "").strip():
        what += " backend over the stand-in driver (the simulator: a rehearsal, not a GPU)"
    elif what == "cuda":
        what += " backend (the GPU)"
    return Side("device", _driver.get_backend()), what


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rehearse", action="store_true",
                   help="the device side is a second simulator (no driver): a rehearsal")
    p.add_argument("--ptxas", action="store_true",
                   help="with --rehearse: the device side loads only what the CUDA toolkit's "
                        "ptxas assembles for sm_90 (as a GPU's JIT)")
    p.add_argument("--programs", help="comma-separated fnmatch patterns of program names "
                   "(ops:*, numba:*, nvrtc:*, saxpy); default: all")
    p.add_argument("--json", help="write the report as JSON here")
    p.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1),
                   help="simulator builds at a time")
    p.add_argument("--list", action="store_true", help="list the programs and exit")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    patterns = args.programs.split(",") if args.programs else None
    progs = ptx_programs.programs(patterns)
    if args.list:
        print("\n".join(pr.name for pr in progs))
        return 0
    if not progs:
        print(f"ptx-vs-gpu: no program matches {args.programs!r}", file=sys.stderr)
        return 2
    from gpuarray_sim import SimBackend

    import gpuarray  # noqa: F401  (registers the host build's toolchain for the executor)

    ptxas = None
    if args.ptxas:
        ptxas = find_ptxas()
        if not args.rehearse or ptxas is None:
            print("ptx-vs-gpu: --ptxas needs --rehearse and the CUDA toolkit's ptxas (PATH, "
                  "/usr/local/cuda*/bin): " + ("not found" if ptxas is None else "no --rehearse"),
                  file=sys.stderr)
            return 2
    device, what = device_side(args.rehearse, ptxas)
    sim = Side("simulator", SimBackend())
    notes = settle(device, progs)
    build_s = prebuild(progs, args.jobs)
    print(f"ptx-vs-gpu: {len(progs)} programs; device: {what}; simulator builds "
          f"{build_s:.1f} s on {args.jobs} threads", flush=True)
    for note in notes:
        print(f"ptx-vs-gpu: {note}", flush=True)
    entries = []
    for prog in progs:
        entry = judge(prog, _attempt(device, prog), _attempt(sim, prog))
        entries.append(entry)
        print(line(entry), flush=True)
    counts = {k: sum(e["status"] == k for e in entries) for k in ("equal", "finding", "DIFFERS")}
    total = time.monotonic() - t0
    summary = (f"ptx-vs-gpu: {len(entries)} programs: {counts['equal']} equal, "
               f"{counts['finding']} findings (documented unknown classes), "
               f"{counts['DIFFERS']} differ in {total:.1f} s")
    print(summary, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"device": what, "notes": notes, "programs": entries, "counts": counts,
             "seconds": round(total, 1), "build_seconds": round(build_s, 1)}, indent=1),
            encoding="utf-8")
    return 1 if counts["DIFFERS"] else 0


if __name__ == "__main__":
    sys.exit(main())
