"""Benchmarks (``transformer-hessian bench ...``): the closed-form Hessian against its peers
(:mod:`.hessian`), torch's encoder (:mod:`.encoder`), language models (:mod:`.models`), curvature at
scale (:mod:`.scale`), training throughput (:mod:`.train`); each method in its own sandboxed process
(:mod:`transformer_hessian.util.sandbox`)."""

from ..util.sandbox import ERROR, OK, OOM, TIMEOUT
from .hessian import BenchError, BenchSettings, benchmark, run_bench
from .tables import markdown_table

__all__ = ["ERROR", "OK", "OOM", "TIMEOUT", "BenchError", "BenchSettings", "benchmark", "markdown_table", "run_bench"]
