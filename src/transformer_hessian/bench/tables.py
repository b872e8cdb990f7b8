"""Markdown rendering of a Hessian benchmark result (the table the README quotes)."""

from __future__ import annotations

from ..util.sandbox import OK
from .methods import CHUNK_COLUMNS
from .shapes import shape_description


def fmt(x, spec: str, none: str = "-") -> str:
    """``format(x, spec)``, or ``none`` for a missing value."""
    return none if x is None else format(x, spec)


def _ref_runs(s: dict) -> str:
    """Clause on the reference's own run count, where it differs from the other methods'."""
    n, warm = s.get("reference_repeats"), s.get("reference_warmup", True)
    if n is None and warm:
        return ""
    n = s["repeats"] if n is None else n
    return f" (reference: {n} run{'s' if n != 1 else ''}{'' if warm else ', no warm-up'})"


def markdown_table(result: dict) -> str:
    """The rows of a result as a Markdown table (speed-up = median time of (a) / method's)."""
    s = result["settings"]
    lines = [
        "# Dense Hessian extraction benchmark",
        "",
        f"Five-group Hessian ([W_Q, W_K, W_V, W_1, W_2], block 0) of a single-block ViT "
        f"({shape_description(s.get('shape', 'default'))}, d_k=d, d_ff=4d), batch {s['batch_size']} of random "
        f"float64 data; median of {s['repeats']} runs after one warm-up{_ref_runs(s)}; memory cap "
        f"{s['memory_cap_gib']:g} GiB above "
        f"the baseline, timeout {s['timeout']:g} s per method and width; tolerance vs (a) "
        f"{result['tolerance']:.0e}. Device: {result['environment'].get('device', '?')}.",
        "",
        "CPU s: median process CPU time of the method's child (all its threads). "
        "Speed-up and relative error max|H - H_ref| / max|H_ref| are against the width's reference "
        "(ref.): (a), or (a') -- the same curvlinops operator applied to blocks of "
        f"{CHUNK_COLUMNS} columns of I -- where (a) did not finish.",
        "",
        "| d | P | | method | status | median s | CPU s | speed-up vs ref. | peak RSS MiB (above baseline) "
        "| peak device MiB | rel. error vs ref. | ref. |",
        "|---:|---:|:--|:--|:--|---:|---:|---:|---:|---:|---:|:--|",
    ]
    for r in result["rows"]:
        method = r["method"] + (f" (auto -> {r['resolved_method']})" if r.get("resolved_method") else "")
        mem = (
            "-"
            if r["peak_rss_mib"] is None
            else f"{r['peak_rss_mib']:.0f} ({fmt(r['peak_above_baseline_mib'], '.0f')})"
        )
        err = fmt(r["rel_error_vs_a"], ".1e")
        if r["agrees_with_a"] is False:
            err += " **DISAGREES**"
        lines.append(
            f"| {r['width']} | {r['n_params']} | ({r['label']}) | {method} | {r['status']} | "
            f"{fmt(r['median_s'], '.4g')} | {fmt(r.get('median_cpu_s'), '.4g')} | {fmt(r['ratio_to_a'], '.2f', '-')}{'x' if r['ratio_to_a'] else ''} | "
            f"{mem} | {fmt(r.get('peak_device_mib'), '.0f')} | {err} | "
            f"{'(' + r['reference'] + ')' if r.get('reference') else '-'}{' cached' if r.get('cached') else ''} |"
        )
    notes = [r for r in result["rows"] if r["status"] != OK and r.get("message")]
    if notes:
        lines += ["", "Notes:", ""]
        lines += [
            f"- d={r['width']} ({r['label']}) {r['method']}: {r['status']}: {' '.join(str(r['message']).split())[:300]}"
            for r in notes
        ]
    return "\n".join(lines) + "\n"
