# Quick start: `make reproduce` (every figure and table into paper/) and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
UV_VERSION := 0.13.9

.PHONY: setup reproduce reproduce-mnist test test-fast test-kill-chain test-explore test-slurm lint report clean lock gpu-check gpu-carry

setup: $(STAMP)

# Re-install only when the dependency files change; a no-op otherwise. uv (pinned, from PyPI)
# installs the pinned lock in seconds; plain pip is the fallback where uv cannot be had.
# --compile-bytecode: uv writes no .pyc by default, and where PYTHONDONTWRITEBYTECODE is set
# every job would compile torch's modules again (docs/timings.md has the measurement).
$(STAMP): pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	@if $(BIN)/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION) && \
	    $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -r requirements.lock; then \
	  $(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps -e . ; \
	else \
	  echo "uv unavailable: installing the lock with pip (slower)"; \
	  $(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock && \
	  $(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e . ; \
	fi
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	@touch $(STAMP)

# After an interrupted run this needs no flag typed by hand: the guard removes a stale lock
# (never one a running snakemake holds) and --rerun-incomplete redoes half-written outputs.
# SNAKEMAKE_ARGS: extra arguments, e.g. SNAKEMAKE_ARGS="--configfile config/paper.yaml".
SNAKEMAKE_ARGS ?=
reproduce: setup
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m transformer_hessian.pipeline.runguard $(BIN)/snakemake --cores all \
		--workflow-profile $(CURDIR)/workflow/profiles/default --rerun-incomplete $(SNAKEMAKE_ARGS)

# The paper's MNIST half (config/paper_mnist.yaml) on MNIST files you already have, offline:
# DATA is a folder with the four files (decompressed or .gz; torchvision's MNIST/raw/ is found too).
# SNAKEMAKE_ARGS (targets, -n, ...) go before --config, which would take them as config entries.
DATA ?=
reproduce-mnist: setup
	@test -n "$(DATA)" || { echo "reproduce-mnist: set DATA to the folder with the four MNIST files, e.g. make reproduce-mnist DATA=~/data/mnist"; exit 2; }
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m transformer_hessian.pipeline.runguard $(BIN)/snakemake --cores all \
		$(SNAKEMAKE_ARGS) --workflow-profile $(CURDIR)/workflow/profiles/default --rerun-incomplete \
		--configfile config/paper_mnist.yaml --config "data={local: '$(DATA)'}"


# ARGS (or PYTEST_ARGS): extra pytest arguments, e.g. make test ARGS='-k spectrum'.
# TEST_WORKERS: pytest-xdist processes, whole modules to each, torch threads shared out among them;
# the tests that need the private SLURM cluster all on one (tests/conftest.py). 0: one process.
# Every test but the kill chain (marker kill_chain, `make test-kill-chain`: about 4 minutes alone,
# which .ci/run runs after this).
ARGS ?=
PYTEST_ARGS ?=
TEST_WORKERS ?= 2
test: setup
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder -m "not kill_chain" $(ARGS) $(PYTEST_ARGS)

# `make reproduce` killed (SIGKILL of its process tree) at a random moment of rule after rule of the
# tiny workflow, then run to the end (docs/reliability.md, section 6); FAULT_SEED and FAULT_RULES=all
# choose the rules.
test-kill-chain: setup
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -m kill_chain $(ARGS) $(PYTEST_ARGS)

# Unit and property tests only: no snakemake jobs, no workflow or SLURM runs (marker `workflow`), and
# none marked `slow` (each such test carries the mark itself); `make test` runs them all.
test-fast: setup
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope -m "not workflow and not slow" $(ARGS) $(PYTEST_ARGS)

# The same tests with fresh random draws in every property test (`make test` fixes each test's
# seed, so that it gives the same verdict on the same commit; see tests/conftest.py).
test-explore: setup
	HYPOTHESIS_PROFILE=explore PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest $(ARGS) $(PYTEST_ARGS)

# Only the SLURM integration test (part of `make test`): as root, installs slurm-wlm + munge with
# apt-get where missing, runs the tiny workflow on a private one-node cluster (the session's one tiny
# run, whose outputs tests/test_workflow.py checks), stops it by PID.
test-slurm: setup
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -v tests/test_slurm.py tests/test_workflow.py

# Every CUDA path in one short run (docs/gpu.md): gpu-check-out/gpu_check.{json,md}. Needs no venv
# (the GPU machine has none): GPU_PYTHON is the python with torch, GPU_SITE a folder of unpacked
# wheels (.carry/wheels), MNIST_SRC the MNIST folder that gpu-carry compresses into .carry/mnist.
GPU_PYTHON ?= python3
gpu-check:
	PYTHONPATH=src$(if $(GPU_SITE),:$(GPU_SITE)) $(GPU_PYTHON) scripts/gpu_check.py gpu-check-out $(GPU_CHECK_ARGS)

gpu-carry:
	$(GPU_PYTHON) scripts/gpu_carry.py $(if $(MNIST_SRC),--mnist $(MNIST_SRC))

lint: setup
	$(BIN)/ruff check src tests notebooks
	$(BIN)/ruff format --check src tests
	$(BIN)/python scripts/check_imports.py
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/snakemake --lint

report: setup
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/snakemake --report paper/report.html

# Regenerate the pinned lock from the current venv (maintainers only).
lock:
	$(BIN)/python -m pip freeze --exclude-editable --exclude transformer-hessian > requirements.lock

clean:
	rm -rf results paper/figures paper/tables paper/summary.json paper/report.html .snakemake
