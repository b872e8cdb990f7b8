# Quick start: `make reproduce` (every figure and table into paper/) and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup reproduce test lint report clean lock

setup: $(STAMP)

# Re-install only when the dependency files change; a no-op otherwise.
$(STAMP): pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	@touch $(STAMP)

# After an interrupted run this needs no flag typed by hand: the guard removes a stale lock
# (never one a running snakemake holds) and --rerun-incomplete redoes half-written outputs.
# SNAKEMAKE_ARGS: extra arguments, e.g. SNAKEMAKE_ARGS="--configfile config/paper.yaml".
SNAKEMAKE_ARGS ?=
reproduce: setup
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m transformer_hessian.runguard $(BIN)/snakemake --cores all \
		--workflow-profile $(CURDIR)/workflow/profiles/default --rerun-incomplete $(SNAKEMAKE_ARGS)

test: setup
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest

lint: setup
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/snakemake --lint

report: setup
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/snakemake --report paper/report.html

# Regenerate the pinned lock from the current venv (maintainers only).
lock:
	$(BIN)/python -m pip freeze --exclude-editable --exclude transformer-hessian > requirements.lock

clean:
	rm -rf results paper/figures paper/tables paper/summary.json paper/report.html .snakemake
