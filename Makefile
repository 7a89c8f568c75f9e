# gpuarray developer commands. `make help` lists them.
#
# demo, test, bench, docs and lint create .venv with `python3 -m venv` when it
# is missing and install the project (editable) with the extras the target
# needs; a stamp file per extra means pip runs again only when pyproject.toml
# or setup.py change. demo, test and bench install one CUDA extra explicitly:
# CUDA_EXTRA=cu13 (default; CUDA 13 drivers, R580+) or CUDA_EXTRA=cu12 (CUDA
# 12.x drivers), e.g. `make demo CUDA_EXTRA=cu12`. gpu-check is different: it
# runs on the GPU machine, which has no package registry, so it uses the
# system python3 on the source tree (PYTHONPATH=.:sim, gpuarray-sim's entry points
# declared in a scratch folder) and never creates a venv or
# installs anything; it builds the C DLPack core in place first
# (setup.py build_ext --inplace; the ctypes core runs if that fails) so the
# run measures what users get, and records which core ran.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
PYTEST_ARGS ?=
# The suite runs on every core (pytest-xdist, the test extra); XDIST= runs it
# in one process. worksteal: idle workers take queued tests from busy ones,
# so a few slow files do not leave a core idle at the end.
XDIST ?= -n auto --dist worksteal
CUDA_EXTRA ?= cu13
ifeq ($(filter $(CUDA_EXTRA),cu12 cu13),)
$(error CUDA_EXTRA=$(CUDA_EXTRA) is not an extra of gpuarray: use cu12 or cu13)
endif
BENCH_ARGS ?=
RESULTS := bench/results
DEPS := pyproject.toml setup.py sim/pyproject.toml $(wildcard gpuarray/interop/_*.[ch])
# The repository's two distributions, installed together (editable): gpuarray
# (the root) and gpuarray-sim (sim/, the simulator the tests run on).
SIM := -e ./sim
# pytest's default file pattern; bench/ has no pytest configuration of its own.
BENCH_FILES := $(wildcard bench/test_*.py bench/*_test.py)

.PHONY: help demo test test-standin test-numba-driver test-cuda-referee test-ptx-kernels test-numba-cudapy bench bench-cudapy docs lint numba-compat gpu-check clean

help:
	@echo "make demo       run the command-line demo (python -m gpuarray)"
	@echo "                (demo, test, bench install gpuarray[$(CUDA_EXTRA)]; CUDA_EXTRA=cu12 for CUDA 12 drivers)"
	@echo "make test       run the test suite on the simulator (PYTEST_ARGS='...' to pass options)"
	@echo "make test-standin  the tests on the cuda backend over the stand-in driver"
	@echo "make test-numba-driver  numba-cuda's own driver tests over the stand-in (.venv-peers)"
	@echo "make test-cuda-referee CUDA_PYTHON_REPO=DIR  cuda.core's and cuda.bindings' own tests over the stand-in (.venv-referee)"
	@echo "make test-ptx-kernels   gpuarray's kernels from their NVRTC PTX on the simulator"
	@echo "make test-numba-cudapy  a selection of numba-cuda's kernel tests over the stand-in"
	@echo "make bench      run bench/ with pytest-benchmark, JSON into $(RESULTS)/"
	@echo "                (simulator unless GPUARRAY_BACKEND=cuda)"
	@echo "make bench-cudapy  numba-cuda's kernel tests: stand-in (cold, warm) vs numba's cudasim"
	@echo "make docs       build the Sphinx docs, warnings as errors, into docs/_build/html"
	@echo "make lint       run ruff and mypy"
	@echo "make numba-compat  run numba-cuda's host-API tests against gpuarray (needs PyPI)"
	@echo "make gpu-check  on a GPU machine: tests on the CUDA backend + benchmarks, no installs"
	@echo "make clean      remove build outputs and caches (keeps .venv)"

$(VPY):
	$(PYTHON) -m venv $(VENV)

# One stamp per set of extras; rebuilt when the packaging metadata changes.
# Installing one CUDA extra replaces the other's cuda-bindings: the stamps
# that name the other extra are no longer true.
$(VENV)/.stamp-%: $(DEPS) | $(VPY)
	$(VPY) -m pip install -e ".[$*]" $(SIM)
	@$(foreach x,cu12 cu13,$(if $(findstring $(x),$*),rm -f $(VENV)/.stamp-*$(filter-out $(x),cu12 cu13);)) true
	@touch $@

demo: $(VENV)/.stamp-$(CUDA_EXTRA)
	$(VPY) -m gpuarray

# pytest's own exit status is make's: 1 for failures, 5 when no test ran.
test: $(VENV)/.stamp-test,$(CUDA_EXTRA)
	GPUARRAY_BACKEND=sim $(VPY) -m pytest $(XDIST) $(PYTEST_ARGS)

# The suite on the cuda backend over the stand-in driver (the real bindings and
# backend, the simulator behind a stand-in libcuda.so.1 built on first use).
test-standin: $(VENV)/.stamp-test,$(CUDA_EXTRA)
	$(VPY) -m gpuarray standin -- $(VPY) -m pytest $(XDIST) $(PYTEST_ARGS)

# numba-cuda's own driver tests (numba.cuda.tests.cudadrv and
# cudapy/test_multiprocessing, 0.30.4, unmodified) over the stand-in driver, and
# the tests with driver-API peers (cuda.core, numba-cuda) on simulated memory.
# A venv of its own (.venv-peers, tests/requirements-peers.txt): the peers never
# enter .venv. sim/tools/numba_driver/run.py fails on any failure that is not a
# listed "needs a user kernel executed" one.
PEERS_VENV ?= .venv-peers
$(PEERS_VENV)/.stamp: $(DEPS) tests/requirements-peers.txt
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install -e ".[cu13]" $(SIM) -r tests/requirements-peers.txt
	@touch $@

test-numba-driver: $(PEERS_VENV)/.stamp
	$(PEERS_VENV)/bin/python sim/tools/numba_driver/run.py
	$(PEERS_VENV)/bin/python -m gpuarray standin -- $(PEERS_VENV)/bin/python -m pytest -q \
	    -p no:cacheprovider tests/interop/test_peers_driver_api.py tests/interop/test_peers_capture.py \
	    tests/interop/test_numba_kernels_page.py sim/tests/standin/test_standin_ptx_supply.py sim/tests/standin/test_standin_nvjitlink.py \
	    sim/tests/standin/test_standin_cuda_core_graphs.py $(PYTEST_ARGS)

# cuda.core 1.1.0's and cuda.bindings 13.5.0's own tests, unmodified, over the
# stand-in (sim/tools/cuda_referee/run.py): the tests are not in the wheels, so
# they come from a cuda-python git directory (CUDA_PYTHON_REPO, with the
# release commit the tool names); a venv of its own (.venv-referee,
# sim/tools/cuda_referee/requirements.txt). REFEREE_ARGS: e.g. --suite bindings --list.
REFEREE_VENV ?= .venv-referee
REFEREE_ARGS ?=
$(REFEREE_VENV)/.stamp: $(DEPS) sim/tools/cuda_referee/requirements.txt
	$(PYTHON) -m venv $(REFEREE_VENV)
	$(REFEREE_VENV)/bin/python -m pip install -e ".[cu13]" $(SIM) -r sim/tools/cuda_referee/requirements.txt
	@touch $@

test-cuda-referee: $(REFEREE_VENV)/.stamp
	@if [ -z "$(CUDA_PYTHON_REPO)" ]; then \
	    echo "make test-cuda-referee: set CUDA_PYTHON_REPO to a cuda-python git directory or checkout" >&2; exit 2; fi
	$(REFEREE_VENV)/bin/python sim/tools/cuda_referee/run.py --repo "$(CUDA_PYTHON_REPO)" $(REFEREE_ARGS)

# gpuarray's kernels from the PTX NVRTC makes with a GPU build's options, run by
# the simulator's PTX executor (GPUARRAY_SIM_KERNELS=ptx), against NumPy: with
# `make test` (host build against NumPy) the kernels are compared three ways.
# The race detector judges the ranges a PTX launch touched at the call that
# races (sim/gpuarray_sim/_race.py), so its tests run in this mode too.
test-ptx-kernels: $(VENV)/.stamp-test,$(CUDA_EXTRA)
	GPUARRAY_BACKEND=sim GPUARRAY_SIM_KERNELS=ptx $(VPY) -m pytest $(XDIST) -q \
	    sim/tests/hostrt/test_kernels_reference.py sim/tests/backend/test_race_detector.py \
	    $(PYTEST_ARGS)

# A CI-sized selection of numba-cuda's kernel tests (numba.cuda.tests.cudapy,
# 0.30.4, unmodified) over the stand-in; every failure listed with its reason
# (sim/tools/numba_cudapy/run.py; --whole runs the whole suite and counts).
test-numba-cudapy: $(PEERS_VENV)/.stamp
	$(PEERS_VENV)/bin/python sim/tools/numba_cudapy/run.py $(NUMBA_CUDAPY_ARGS)

# Simulator runs are smoke tests of the benchmark code, not measurements:
# their JSON is named tmp-* (git-ignored). CUDA runs are committable.
bench: $(VENV)/.stamp-bench,$(CUDA_EXTRA)
	@if [ -z "$(BENCH_FILES)" ]; then echo "make bench: no benchmarks (bench/test_*.py) yet" >&2; exit 1; fi
	@mkdir -p $(RESULTS)
	@backend=$${GPUARRAY_BACKEND:-sim}; \
	if [ "$$backend" = cuda ]; then out=$(RESULTS)/cuda-$$(date -u +%Y%m%dT%H%M%SZ).json; \
	else out=$(RESULTS)/tmp-$$backend-$$(date -u +%Y%m%dT%H%M%SZ).json; fi; \
	echo "backend=$$backend -> $$out"; \
	GPUARRAY_BACKEND=$$backend $(VPY) -m pytest bench --benchmark-only \
	    --benchmark-json="$$out" $(BENCH_ARGS); \
	if [ -f bench/plot.py ]; then $(VPY) bench/plot.py "$$out"; fi

# numba-cuda's kernel tests over the stand-in against numba's own simulator, cold
# and warm, in one run (bench/test_cudapy_sim.py: minutes; needs .venv-peers).
bench-cudapy: $(VENV)/.stamp-bench,$(CUDA_EXTRA) $(PEERS_VENV)/.stamp
	GPUARRAY_BENCH_CUDAPY=1 $(MAKE) bench BENCH_ARGS="-s -k test_cudapy_modules $(BENCH_ARGS)"

docs: $(VENV)/.stamp-docs
	$(VPY) -m sphinx -W --keep-going -b html docs docs/_build/html

# Both tools run even when the first finds something; the exit status is
# non-zero if either did. mypy's targets and options are in pyproject.toml.
# The environment is make test's (one install for both: CI runs lint, then test).
lint: $(VENV)/.stamp-test,$(CUDA_EXTRA)
	@$(VPY) -m ruff --version >/dev/null 2>&1 || $(VPY) -m pip install ruff
	@$(VPY) -m mypy --version >/dev/null 2>&1 || $(VPY) -m pip install mypy
	@status=0; \
	echo "$(VPY) -m ruff check ."; $(VPY) -m ruff check . || status=$$?; \
	echo "$(VPY) -m mypy"; $(VPY) -m mypy || status=$$?; \
	exit $$status

# numba-cuda's own host-API tests against gpuarray on the simulator
# (tools/numba_compat/run.py; docs/migrating.rst). Fetches numba-cuda from
# the package index into a temporary folder, so it is not part of `test`.
numba-compat: $(VENV)/.stamp-test,$(CUDA_EXTRA)
	$(VPY) tools/numba_compat/run.py $(NUMBA_COMPAT_ARGS)

# Runs on the GPU machine (issue 27): system python3, no venv, no downloads;
# tools/gpu_check/run.py runs each step under its own time limit within an
# 8-minute budget, every step even after a failure: the carried wheels (.whl/),
# the C DLPack core in place, the environment, the suite on the cuda backend
# (pytest-xdist -n 8 when importable, then the tests marked serial), the
# README example, bench/ in quick mode, compute-sanitizer memcheck and
# racecheck over the kernel differential tests, the report. Outputs in $OUT
# when set, else bench/results/: gpu-check-<stamp>.{log,junit.xml,bench.json,
# env.txt,steps.json,md}. The exit status is non-zero if any step failed.
# Rehearsal without a GPU (docs/validation.md):
#   .venv/bin/python -m gpuarray standin -- make gpu-check PYTHON=.venv/bin/python
gpu-check:
	$(PYTHON) tools/gpu_check/run.py --python $(PYTHON) $(GPU_CHECK_ARGS)

clean:
	rm -rf build dist *.egg-info docs/_build .pytest_cache .hypothesis .benchmarks $(RESULTS)/tmp*
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +
