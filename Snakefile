# Reproduction pipeline for "Closing the Curvature Gap: Full Transformer Hessians and Their
# Implications for Scaling Laws" (arXiv 2510.16927). `snakemake --cores all` regenerates every
# figure and table into paper/. See README.md and config/README.md.

import glob
import os

from snakemake.utils import min_version, validate

min_version("9.0")


# The jobs' PATH and the package (workflow/rules/environment.smk), before anything reads the config.
include: "workflow/rules/environment.smk"


# The embedded default; a --configfile on the command line replaces it (not merged into it).
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


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
TABLES = ["run_summary"]  # written by the `tables` rule (a study writes its own)
ALL_TABLES = TABLES + notebook_tables()  # + tables of figure notebooks (+ each study's own: its rule file appends them)
# What the rule files add for the consumers included last (claims.smk, figures.smk): JSON lists of
# finished claim rows as (RANK, path) pairs (claims --rows, in the order of their ranks: the rank is
# the rows' place in paper/claims.md, the pipeline's own rows at OWN_CLAIMS_RANK in claims.smk) and
# summary sections as (NAME, path) pairs (summary --section NAME=PATH). A study's rule file appends
# its own, so adding a study edits neither consumer.
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


include: "workflow/rules/hooks.smk"


rule all:
    default_target: True
    input:
        [FIGURE_FILES[fig][ext] for fig in FIGURES for ext in ("pdf", "png")],
        table_files(ALL_TABLES),
        rules.summary.output,
        rules.claims.output.md,
        rules.report_pages.output,
