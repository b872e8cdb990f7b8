# Reproduction pipeline for "Closing the Curvature Gap: Full Transformer Hessians and Their
# Implications for Scaling Laws" (arXiv 2510.16927). `snakemake --cores all` regenerates every
# figure and table into paper/. See README.md and config/README.md.

import glob
import json
import os
import sys
import time

RUN_START = time.time()  # the recap at the end (onsuccess) reports the run's wall time
# The rules call the project's commands (transformer-hessian, papermill) by name: put the bin
# folder of the Python that runs snakemake (the venv's) first on the jobs' PATH, so that
# `.venv/bin/snakemake` works without activating the venv.
_BIN = os.path.dirname(sys.executable)
if os.environ.get("PATH", "").split(os.pathsep)[0] != _BIN:
    os.environ["PATH"] = _BIN + os.pathsep + os.environ.get("PATH", "")

from snakemake.utils import min_version, validate

min_version("9.0")

# PATH is read and extended above (the venv's bin first), and jobs need it.
envvars:
    "PATH",


# The embedded default; a --configfile on the command line replaces it (not merged into it).
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


# The package comes from the Python that runs snakemake (make setup installs this checkout into .venv,
# editable); the workflow does not reach into src/ through sys.path.
try:
    import transformer_hessian
except ImportError:
    raise SystemExit(
        f"transformer-hessian: the package is not installed for {sys.executable}; run `make setup` and "
        "call .venv/bin/snakemake (or `make reproduce`), or `pip install -e .` into this Python"
    )
_SRC = os.path.realpath(os.path.join(workflow.basedir, "src"))
if not os.path.realpath(transformer_hessian.__file__).startswith(_SRC + os.sep):
    print(
        f"transformer-hessian: note: the package comes from {os.path.dirname(transformer_hessian.__file__)}, "
        f"not from this checkout ({_SRC}); the jobs run that code",
        file=sys.stderr,
    )
from transformer_hessian.config.validate import SCHEMA_PATH, ConfigError, check_config_files, config_hash, unexpected_config_error, validate_config  # noqa: E402

# Schema check with messages that name the offending key, plus cross-key checks; then
# snakemake's own validation against the same schema (fills in defaults). Every config file
# (embedded or --configfile) is also re-read with a loader that rejects duplicate keys.
# A bad config ends the run here, before any job, with one message and no traceback.
try:
    check_config_files(workflow.configfiles)
    validate_config(config, cli_overrides=dict(workflow.config_settings.config))
except ConfigError as err:
    raise SystemExit(f"transformer-hessian: {err}")
except Exception as err:  # noqa: BLE001 - an input no check foresaw: one line, the traceback in a log file
    raise SystemExit(unexpected_config_error(err))
validate(config, str(SCHEMA_PATH))

CONFIG_HASH = config_hash(config)
DATA_ROOT = config["data"]["root"]
HEXP = config["hessian"]["experiment"]
LEXP = config["landscape"]["experiment"]
STAGES = ["init", "trained"]

from transformer_hessian.registry import figure_ids, notebook_tables  # noqa: E402
from transformer_hessian.util.datanames import DATA_SETS  # noqa: E402

FIGURES = figure_ids(config)  # the registry's figures (src/transformer_hessian/registry/figures.py) this config switches on
TABLES = ["block_norms", "run_summary", "closed_form_check"]  # written by the `tables` rule
ALL_TABLES = TABLES + notebook_tables()  # + tables of figure notebooks (+ each study's own: its rule file appends them)
# What the rule files add for the consumers included last (claims.smk, figures.smk): JSON lists of
# finished claim rows (claims --rows) and summary sections (summary --section NAME=PATH), as
# (NAME, path) pairs. A study's rule file appends its own, so adding a study edits neither consumer.
CLAIM_ROW_FILES = []
SUMMARY_SECTIONS = []


wildcard_constraints:
    stage="init|trained",
    exp="[A-Za-z][A-Za-z0-9_]*",
    dataset="|".join(DATA_SETS),


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
# The Hessian study before the rule files that read its outputs (rules.hessian, rules.theory) while
# their rules are defined: bounds, the other studies, the tables, the claims and the summary.
include: "workflow/rules/studies/hessian.smk"


# Every study's rule file (workflow/rules/studies/<name>.smk, sorted): it defines the study's rules
# (under its own config switch), appends its tables to ALL_TABLES and its claim rows and summary
# section to the lists above. A new study adds its file there; nothing here changes.
for _study_rules in sorted(glob.glob(os.path.join(workflow.basedir, "workflow", "rules", "studies", "*.smk"))):
    if os.path.basename(_study_rules) != "hessian.smk":  # included above, before its readers

        include: _study_rules


# Consumers of every rule above (each input is a `rules.<producer>.output`): included last.
include: "workflow/rules/claims.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/report.smk"


# The first page of `snakemake --report`: what this is and the claims verdicts (rule report_pages).
report: "workflow/report/workflow.rst"


# A checkpoint damaged after its job finished (see docs/reliability.md) is set aside, so that
# its train job runs again and resumes from the newest valid epoch checkpoint.
if workflow.is_main_process:
    from transformer_hessian.train.checkpoints import set_aside_damaged  # noqa: E402

    set_aside_damaged(
        [str(p) for e in config["experiments"] for p in expand([rules.train.output.init, rules.train.output.final], exp=e)],
        dry_run=workflow.dryrun,
    )


rule all:
    default_target: True
    input:
        [FIGURE_FILES[fig][ext] for fig in FIGURES for ext in ("pdf", "png")],
        table_files(ALL_TABLES),
        rules.summary.output,
        rules.claims.output.md,
        rules.report_pages.output,


# A recap of at most 20 lines, printed last: where the outputs are, the claim counts (the claims
# that were not reproduced named), the figure to open first, the wall time. The full verdict table
# is paper/claims.md.
onsuccess:
    if os.path.exists(rules.claims.output.json):
        from transformer_hessian.pipeline.recap import recap_lines  # noqa: E402

        pngs = {fig: FIGURE_FILES[fig]["png"] for fig in FIGURES}
        print("\n" + "\n".join(recap_lines(rules.claims.output.json, pngs, time.time() - RUN_START)))
