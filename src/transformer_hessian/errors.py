"""Every error class of the package, in one module that imports nothing from the package.

Each is re-exported by the module that raised it first (``config.ConfigError``, ``data.DataError``,
``train.TrainingError``, ``checkpoints.CheckpointError``, ``io.ResultError``,
``claims.compare.VerdictMismatch``, ``bench.hessian.BenchError``, ``pipeline.notebooks.NotebookError``),
so either import works.
:func:`transformer_hessian.pipeline.cli.main` turns :data:`EXPECTED` into one line on stderr and exit status 1.
"""

from __future__ import annotations

__all__ = [
    "EXPECTED",
    "BenchError",
    "CheckpointError",
    "ConfigError",
    "DataError",
    "NotebookError",
    "ResultError",
    "TrainingError",
    "VerdictMismatch",
]


class ConfigError(ValueError):
    """A configuration value is missing, of the wrong type, or inconsistent."""


class DataError(RuntimeError):
    """A data set cannot be downloaded, verified or read; the message says what to do."""


class CheckpointError(RuntimeError):
    """A checkpoint is missing, damaged (checksum), unreadable or not one of ours."""


class NotebookError(RuntimeError):
    """A cell of a figure notebook raised (``transformer-hessian notebook``); the traceback is in the
    executed notebook and the rule's log."""


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. a non-finite loss)."""


class ResultError(ValueError):
    """A result file is damaged, edited after it was written, or not readable."""


class VerdictMismatch(ValueError):
    """The verdicts of a run differ from the committed snapshot."""


class BenchError(ValueError):
    """A method disagreed with (a) or failed; raised after the results are written."""


#: The package's own errors: a command that raises one ends with one line, not a traceback.
EXPECTED = (
    ConfigError,
    DataError,
    CheckpointError,
    TrainingError,
    ResultError,
    VerdictMismatch,
    BenchError,
    NotebookError,
)
