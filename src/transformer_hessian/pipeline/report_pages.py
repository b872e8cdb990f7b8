"""HTML pages of the review report (``snakemake --report``; rule ``report_pages``).

Snakemake's report shows HTML results inline and puts the workflow description
(``workflow/report/workflow.rst``) on its first page; these pages give it the claims verdicts
(a compact table for the first page and the full one), every table of ``paper/tables/``, the
config and the provenance. Plain HTML with its own small style sheet: no scripts, no network.
"""

from __future__ import annotations

import csv
import html
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..claims.schema import NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED, VERDICTS

__all__ = [
    "claims_page",
    "claims_summary_fragment",
    "config_page",
    "provenance_page",
    "table_page",
    "write_report_pages",
]

STYLE = """
body { font-family: system-ui, sans-serif; font-size: 14px; margin: 1em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #bbb; padding: 3px 6px; vertical-align: top; text-align: left; }
th { background: #eee; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.reproduced { color: #1a7f37; font-weight: bold; }
.not-reproduced { color: #c0262d; font-weight: bold; }
.not-testable { color: #7a6300; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; }
"""
VERDICT_CLASS = {REPRODUCED: "reproduced", NOT_REPRODUCED: "not-reproduced", NOT_TESTABLE: "not-testable"}


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{STYLE}</style></head>\n<body>\n<h1>{_e(title)}</h1>\n{body}\n</body></html>\n"
    )


def _counts(rows: Sequence[Mapping[str, Any]]) -> str:
    n = {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}
    return (
        f"{n[REPRODUCED]} reproduced, {n[NOT_REPRODUCED]} not reproduced, "
        f"{n[NOT_TESTABLE]} not testable on this data set (of {len(rows)} claims)"
    )


def _verdict(v: str) -> str:
    return f'<span class="{VERDICT_CLASS.get(v, "")}">{_e(v)}</span>'


def _load_claims(path: str | Path) -> list[dict]:
    return json.loads(Path(path).read_text(encoding="utf-8"))["claims"]


def claims_summary_fragment(claims_json: str | Path) -> str:
    """A compact verdict table (claim, where in the paper, verdict) for the report's first page."""
    rows = _load_claims(claims_json)
    body = "".join(
        f"<tr><td><code>{_e(r['id'])}</code></td><td>{_e(r['source'])}</td><td>{_verdict(r['verdict'])}</td></tr>"
        for r in rows
    )
    return (
        f'<p id="claims-counts"><b>Claims of the paper: {_e(_counts(rows))}.</b> What was measured and the '
        "rule of each verdict: the page <i>claims.html</i> (category Claims), and <code>paper/claims.md</code>.</p>"
        f'<table id="claims-summary"><tr><th>claim</th><th>paper</th><th>verdict</th></tr>{body}</table>'
    )


def claims_page(claims_json: str | Path) -> str:
    """Every claim with the quoted text, where in the paper, the verdict, what was measured, the rule."""
    rows = _load_claims(claims_json)
    body = "".join(
        f"<tr><td><code>{_e(r['id'])}</code><br>&ldquo;{_e(r['claim'])}&rdquo;</td><td>{_e(r['source'])}</td>"
        f"<td>{_verdict(r['verdict'])}</td><td>{_e(r['measured'])}</td><td>{_e(r.get('rule', ''))}</td></tr>"
        for r in rows
    )
    return _page(
        "Claims of the paper: verdicts",
        f'<p id="claims-counts">{_e(_counts(rows))}. Also in <code>paper/claims.md</code> and '
        "<code>paper/claims.json</code>.</p>"
        '<table id="claims"><tr><th>claim</th><th>paper</th><th>verdict</th><th>measured</th><th>rule</th></tr>'
        f"{body}</table>",
    )


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def table_page(csv_path: str | Path) -> str:
    """The CSV table ``csv_path`` (paper/tables/<stem>.csv) as an HTML table."""
    path = Path(csv_path)
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    if not rows:
        raise ValueError(f"{path}: empty table")
    head = "".join(f"<th>{_e(c)}</th>" for c in rows[0])
    body = "".join(
        "<tr>"
        + "".join(f'<td class="num">{_e(c)}</td>' if _is_number(c) else f"<td>{_e(c)}</td>" for c in row)
        + "</tr>"
        for row in rows[1:]
    )
    stem = path.stem
    return _page(
        f"Table {stem}",
        f"<p>paper/tables/{_e(stem)}.csv ({len(rows) - 1} rows; LaTeX and Markdown next to it).</p>"
        f'<table class="paper-table"><tr>{head}</tr>{body}</table>',
    )


def config_page(config: Mapping[str, Any], config_hash: str | None = None) -> str:
    """The validated config of the run (defaults filled in) as YAML."""
    import yaml

    text = yaml.safe_dump(dict(config), sort_keys=False, default_flow_style=None, width=100)
    note = (
        f"<p>Config hash {_e(config_hash)} (<code>paper/summary.json</code>, key provenance).</p>"
        if config_hash
        else ""
    )
    return _page("Config of this run", f"{note}<p>With every default filled in.</p><pre>{_e(text)}</pre>")


def _kv_table(mapping: Mapping[str, Any]) -> str:
    rows = "".join(
        f"<tr><th>{_e(k)}</th><td>{_e(json.dumps(v) if isinstance(v, (dict, list)) else v)}</td></tr>"
        for k, v in mapping.items()
    )
    return f"<table>{rows}</table>"


def provenance_page(summary_json: str | Path) -> str:
    """The run's provenance (``paper/summary.json``: commit, versions, device, config hash) and each
    figure's (notebook, rule, sha256 of its inputs and outputs)."""
    summary = json.loads(Path(summary_json).read_text(encoding="utf-8"))
    parts = ["<h2>Run</h2>", _kv_table(summary.get("provenance", {}))]
    figures = summary.get("figure_provenance", {})
    if figures:
        parts.append(
            "<h2>Figures</h2><table><tr><th>figure</th><th>rule</th><th>notebook</th><th>files (sha256)</th></tr>"
        )
        for fig, entry in figures.items():
            files = "<br>".join(
                f"{_e(p)}: <code>{_e(str(d)[:16])}</code>"
                for p, d in {**entry.get("inputs", {}), **entry.get("outputs", {})}.items()
            )
            parts.append(
                f"<tr><td>{_e(fig)}</td><td>{_e(entry.get('rule', ''))}</td><td>{_e(entry.get('notebook', ''))}</td>"
                f"<td>{files}</td></tr>"
            )
        parts.append("</table>")
    return _page("Provenance", "".join(parts))


def write_report_pages(
    claims_json: str,
    summary_json: str,
    tables: Iterable[str],
    config: Mapping[str, Any],
    out_dir: str,
) -> list[Path]:
    """Write claims.html, claims_summary.html, config.html, provenance.html and
    tables/<stem>.html (one per CSV in ``tables``) into ``out_dir``; returns the paths."""
    out = Path(out_dir)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    summary = json.loads(Path(summary_json).read_text(encoding="utf-8"))
    pages = {
        out / "claims.html": claims_page(claims_json),
        out / "claims_summary.html": claims_summary_fragment(claims_json),
        out / "config.html": config_page(config, summary.get("provenance", {}).get("config_hash")),
        out / "provenance.html": provenance_page(summary_json),
    }
    for csv_path in tables:
        pages[out / "tables" / f"{Path(csv_path).stem}.html"] = table_page(csv_path)
    for path, text in pages.items():
        path.write_text(text, encoding="utf-8")
    return list(pages)
