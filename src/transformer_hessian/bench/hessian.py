"""Benchmark of dense exact Hessian extraction (``transformer-hessian bench hessian``).

Times the dense five-group Hessian ([W_Q, W_K, W_V, W_1, W_2] of block 0) of the default
single-block ViT (8x8 one-channel images, patch 2 -> L = 16 tokens, 10 classes, width d,
d_k = d, d_ff = 4 d) on one batch of random float64 inputs and labels, by

- (a) ``curvlinops``: ``HessianLinearOperator @ I`` (the reference),
- (b) ``torch_func_hessian``: ``torch.func.hessian`` of the loss w.r.t. the flat group vector,
- (c) ``closed_form``: ``transformer_hessian.theory.model_loss_hessian``,
- (d) ``pipeline``: ``hessian.compute_hessian(..., method="auto")`` (records what auto resolved to),
- (e) ``vmap``: chunked vmapped Hessian-vector products (``hessian.hessian_vmap``).

Every (method, width) runs in its own subprocess (``python -m transformer_hessian.bench.worker``), so
its peak resident memory is its own: the child measures its RSS after imports and set-up
(the baseline), resets the kernel's high-water mark, runs one excluded warm-up and
``repeats`` timed runs, and reports the peak. A memory cap is enforced in the child, armed
only after the imports (CUDA builds of torch reserve large virtual ranges at import):
``RLIMIT_AS`` = current address space + cap, so an allocation beyond it fails at once, plus a
watchdog thread on the resident set (baseline + cap) as a second line. Either way the row is
recorded as ``out of memory``; a child running past ``timeout`` seconds is killed and recorded
as ``timeout``. Each result is compared with (a) (``max|H - H_a| / max|H_a|``, float64) from
the Hessians the children save to a scratch folder, read back memory-mapped in row chunks.

curvlinops 3 applies the operator to all columns it is given in one vmapped call, so an
unchunked ``op @ I`` needs as much memory as (b) (out of memory at d = 16 under an 8 GiB cap);
``hessian_curvlinops`` now feeds I in column chunks. Should (a) still not finish (out of memory,
timeout), (a') -- the same operator applied to 256-column blocks of I, implemented here --
runs next and is the reference of that width (each row names its ``reference``). Results go to ``<out_dir>/hessian_bench.json``
and ``.md`` (rewritten atomically after every row); the command then exits non-zero
(``BenchError``) if any method disagreed with the reference beyond 1e-10 or failed with an
error. Out of memory and timeout are results, not failures.

The paper's shape (28x28, patch 4 -> L = 49, d = 16, batch 128; curvlinops once against the
closed form, tolerance 1e-12) is one command, ``transformer-hessian bench hessian --paper-shape``;
each row also reports the child's process CPU time (``median_cpu_s``), less sensitive than the
wall time to other load. The closed form's flop and memory budget: docs/theory.md, section 18.

Modules: ``settings`` (options, ``--paper-shape`` defaults), ``problem`` (model, batch,
methods), ``worker`` (the child process), ``case`` (launching one child, its row), ``compare``
(relative error, speed-up), ``cache`` (reference cache); this module orchestrates.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from ..errors import BenchError  # noqa: F401  (re-exported: the class lives in errors.py)
from ..util.env import run_environment
from ..util.files import log, write_text
from ..util.io import write_json
from ..util.sandbox import ERROR, OK, OOM, TIMEOUT  # noqa: F401  (OOM, TIMEOUT: imported from here by the tests)
from .cache import _cached_reference, _store_reference
from .case import run_case
from .compare import _finalise_rows, relative_error  # noqa: F401  (relative_error: tests)
from .methods import FALLBACK, LABELS
from .problem import build_problem, hessian_curvlinops_chunked  # noqa: F401  (used by the tests through this module)
from .settings import BenchSettings, n_group_params, settings_from_args  # noqa: F401  (n_group_params: tests)
from .tables import fmt, markdown_table
from .worker import _worker_main


def benchmark(s: BenchSettings) -> dict:
    """Run every (width, method); write ``hessian_bench.json`` / ``.md``; return the result.

    The reference of a width is (a); where (a) does not finish (out of memory, timeout) and
    (a) was requested, (a') -- the same operator applied to blocks of columns -- runs right
    after it and takes its place. ``rel_error_vs_a`` / ``ratio_to_a`` are relative to the
    row's ``reference``.
    """
    out = Path(s.out_dir)
    labels = s.labels()
    result = {
        "benchmark": "dense Hessian extraction",
        "settings": asdict(s),
        "tolerance": s.tolerance,
        "environment": run_environment(s.threads, s.device),
        "complete": False,
        "rows": [],
    }

    def write() -> None:
        public = [{k: v for k, v in r.items() if not k.startswith("_")} for r in result["rows"]]
        snapshot = {**result, "rows": public}
        write_json(snapshot, out / "hessian_bench.json", sealed=False)
        write_text(markdown_table(snapshot), out / "hessian_bench.md")

    def run(label: str, width: int, ref: dict | None, workdir: Path) -> dict:
        is_ref = label in ("a", FALLBACK[0])
        row = _cached_reference(s, label, width, workdir) if is_ref else None
        if row is None:
            log.info("bench hessian: d=%d (%s) %s ...", width, label, LABELS[label])
            row = run_case(label, width, s, workdir)
            if is_ref:
                _store_reference(s, label, width, row)
        _finalise_rows([row], row if is_ref else ref, s.tolerance)
        log.info(
            "bench hessian: d=%d (%s) %s: %s, median %s s, peak RSS %s MiB, rel. error %s%s",
            width,
            label,
            row["method"],
            row["status"],
            fmt(row["median_s"], ".4g"),
            fmt(row["peak_rss_mib"], ".0f"),
            fmt(row["rel_error_vs_a"], ".1e"),
            f" ({' '.join(str(row['message']).split())[:200]})" if row["status"] != OK and row["message"] else "",
        )
        result["rows"].append(row)
        write()
        return row

    workdir = Path(tempfile.mkdtemp(prefix="hessian_bench_"))
    try:
        for width in s.widths:
            ref = None
            for label in labels:
                row = run(label, width, ref, workdir)
                if label == "a":
                    ref = row
                    if row["status"] != OK:
                        log.info("bench hessian: d=%d: (a) did not finish; running (a') as the reference", width)
                        ref = run(FALLBACK[0], width, None, workdir)
                if row is not ref and row.get("_hessian_path"):
                    Path(row["_hessian_path"]).unlink(missing_ok=True)
            if ref is not None and ref.get("_hessian_path"):
                Path(ref["_hessian_path"]).unlink(missing_ok=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    _add_verdicts(result)
    result["complete"] = True
    write()
    for r in result["rows"]:
        r.pop("_hessian_path", None)
    return result


def _add_verdicts(result: dict) -> None:
    """``disagreements`` (rows whose Hessian differs from their reference), ``errors`` (rows that
    failed) and ``passed`` (neither) of a finished benchmark ``result``."""
    rows = result["rows"]
    result["disagreements"] = [
        f"d={r['width']} ({r['label']}) {r['method']}: {fmt(r['rel_error_vs_a'], '.3e', 'non-finite')} "
        f"vs ({r['reference']})"
        for r in rows
        if r["agrees_with_a"] is False
    ]
    result["errors"] = [
        f"d={r['width']} ({r['label']}) {r['method']}: {r['message']}" for r in rows if r["status"] == ERROR
    ]
    result["passed"] = not result["disagreements"] and not result["errors"]


def run_bench(a) -> dict:
    """``transformer-hessian bench hessian``: run, write, print; BenchError if a method failed."""
    s = settings_from_args(a)
    if s.repeats < 1 or s.batch_size < 1 or not s.widths or min(s.widths) < 1:
        raise ValueError("bench hessian: --repeats, --batch-size and --widths must be positive")
    if s.reference_repeats is not None and s.reference_repeats < 1:
        raise ValueError("bench hessian: --reference-repeats must be positive")
    result = benchmark(s)
    print(markdown_table(result), end="", flush=True)
    out = Path(s.out_dir)
    log.info("bench hessian: wrote %s and %s", out / "hessian_bench.json", out / "hessian_bench.md")
    problems = result["disagreements"] + result["errors"]
    if problems:
        raise BenchError(
            f"{len(result['disagreements'])} method(s) disagree with (a) beyond {s.tolerance:.0e} and "
            f"{len(result['errors'])} failed: " + "; ".join(p[:300] for p in problems)
        )
    return result


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
