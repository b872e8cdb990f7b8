"""Agreement and speed-up of the rows of one width against its reference row."""

from __future__ import annotations

import math

import numpy as np

from ..util.sandbox import ERROR, OK


def relative_error(path_h: str, path_ref: str, chunk_rows: int = 512) -> tuple[float, float]:
    """(max|H - H_ref| / max|H_ref|, max|H - H_ref|) of two saved (P, P) arrays, row chunks."""
    H = np.load(path_h, mmap_mode="r")
    R = np.load(path_ref, mmap_mode="r")
    if H.shape != R.shape:
        raise ValueError(f"shape {H.shape} differs from the reference's {R.shape}")
    err, scale = 0.0, 0.0
    for i in range(0, R.shape[0], chunk_rows):
        r = np.asarray(R[i : i + chunk_rows])
        h = np.asarray(H[i : i + chunk_rows])
        diff = np.abs(h - r)
        if not np.all(np.isfinite(diff)):
            return math.inf, math.inf
        err = max(err, float(diff.max()))
        scale = max(scale, float(np.abs(r).max()))
    return (err / scale if scale > 0 else err), err


def _finalise_rows(rows: list[dict], ref: dict | None, tol: float) -> None:
    """Relative errors and speed-ups against the width's reference row (in place)."""
    for r in rows:
        if ref is None or ref["status"] != OK or r["status"] != OK:
            continue
        r["reference"] = ref["label"]
        if r is ref:
            r["rel_error_vs_a"], r["max_abs_error_vs_a"] = 0.0, 0.0
        else:
            try:
                r["rel_error_vs_a"], r["max_abs_error_vs_a"] = relative_error(r["_hessian_path"], ref["_hessian_path"])
            except (ValueError, OSError) as err:
                r["status"], r["message"] = ERROR, f"comparison with ({ref['label']}) failed: {err}"
                continue
        if not math.isfinite(r["rel_error_vs_a"]):  # JSON has no inf / nan
            r["rel_error_vs_a"] = r["max_abs_error_vs_a"] = None
            r["agrees_with_a"], r["message"] = False, "non-finite entries in H or in the reference"
            continue
        r["agrees_with_a"] = bool(r["rel_error_vs_a"] <= tol)
        r["ratio_to_a"] = ref["median_s"] / r["median_s"] if r["median_s"] else None
