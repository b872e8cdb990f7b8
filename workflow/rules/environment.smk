# The environment the rules run in, before anything reads the config: the jobs' PATH and the package.
# Included first by the Snakefile.

import os
import sys

# The rules call the project's commands (transformer-hessian, papermill) by name: put the bin
# folder of the Python that runs snakemake (the venv's) first on the jobs' PATH, so that
# `.venv/bin/snakemake` works without activating the venv.
_BIN = os.path.dirname(sys.executable)
if os.environ.get("PATH", "").split(os.pathsep)[0] != _BIN:
    os.environ["PATH"] = _BIN + os.pathsep + os.environ.get("PATH", "")


# PATH is read and extended above (the venv's bin first), and jobs need it.
envvars:
    "PATH",


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


# Snakemake prints each job's file lists and shell command on one line (rule all's 80 inputs made a
# line of 2,085 characters): fold them on its terminal, losing nothing (transformer_hessian.pipeline.terminal).
from snakemake.logging import logger as _snakemake_logger  # noqa: E402
from transformer_hessian.pipeline.terminal import install as _fold_long_lines  # noqa: E402

_fold_long_lines(_snakemake_logger)
