"""Benchmarks (``transformer-hessian bench ...``): the process sandbox and the Hessian benchmark."""

from ..util.sandbox import ERROR, OK, OOM, TIMEOUT
from .hessian import BenchError, BenchSettings, benchmark, run_bench
from .tables import markdown_table

__all__ = ["ERROR", "OK", "OOM", "TIMEOUT", "BenchError", "BenchSettings", "benchmark", "markdown_table", "run_bench"]
