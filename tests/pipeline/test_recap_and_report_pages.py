"""The end-of-run recap, the report's HTML pages, settings files (@FILE) and the run guard's
check of --configfile words: unit tests on small inputs (no workflow run)."""

import csv
import html
import json
import re

import pytest

from transformer_hessian.claims.schema import NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED


def _claims(tmp_path, verdicts):
    rows = [
        {
            "id": f"claim_{i}",
            "claim": f"claim <{i}> & text",
            "source": f"Sec. {i}",
            "rule": "a rule",
            "measured": f"x = {i}",
            "verdict": v,
            "evidence": "results/x.json",
        }
        for i, v in enumerate(verdicts)
    ]
    path = tmp_path / "claims.json"
    path.write_text(json.dumps({"config_hash": "abc", "claims": rows}))
    return path, rows


@pytest.mark.parametrize("n_failed", [0, 1, 5, 200])
def test_recap_counts_names_the_failures_and_stays_short(tmp_path, n_failed):
    from transformer_hessian.pipeline.recap import MAX_LINES, recap_lines

    verdicts = [REPRODUCED] * 7 + [NOT_REPRODUCED] * n_failed + [NOT_TESTABLE] * 2
    path, rows = _claims(tmp_path, verdicts)
    figures = {"fig2": "paper/figures/fig2.png", "fig3": "paper/figures/fig3.png"}
    lines = recap_lines(path, figures, 3725.4)
    assert len(lines) <= MAX_LINES and max(map(len, lines)) <= 130
    text = "\n".join(lines)
    assert lines[0].startswith("Finished in 1 h 02 min.")
    assert f"Claims: 7 reproduced, {n_failed} not reproduced, 2 not testable on this data set (of {len(rows)})" in text
    failed = [r["id"] for r in rows if r["verdict"] == NOT_REPRODUCED]
    if n_failed <= 20:
        assert all(re.search(rf"\b{name}\b", text) for name in failed)
    else:  # too many to list: the shown names plus "... and N more" add up
        shown = [name for name in failed if re.search(rf"\b{name}\b", text)]
        more = int(re.search(r"\.\.\. and (\d+) more", text).group(1))
        assert shown and len(shown) + more == n_failed
    assert "Open first: paper/figures/fig3.png" in text and "paper/claims.md" in text


def test_recap_without_fig3_opens_the_first_figure(tmp_path):
    from transformer_hessian.pipeline.recap import recap_lines
    from transformer_hessian.util.progress import format_seconds

    path, _ = _claims(tmp_path, [REPRODUCED])
    assert "Open first: paper/figures/fig2.png" in "\n".join(recap_lines(path, {"fig2": "paper/figures/fig2.png"}, 5))
    assert [format_seconds(s) for s in (0.4, 59.6, 75.2, 3600)] == ["0 s", "1 min 00 s", "1 min 15 s", "1 h 00 min"]


def test_report_pages_hold_every_claim_table_row_config_and_provenance(tmp_path):
    from transformer_hessian.pipeline.report_pages import write_report_pages

    claims, rows = _claims(tmp_path, [REPRODUCED, NOT_REPRODUCED, NOT_TESTABLE])
    summary = tmp_path / "summary.json"
    summary.write_text(
        json.dumps(
            {
                "provenance": {"config_hash": "cafe01", "git_commit": "0123abc", "versions": {"torch": "2.14.1"}},
                "figure_provenance": {
                    "fig3": {"rule": "fig3_fig4", "notebook": "notebooks/x.ipynb", "inputs": {"a.npz": "f" * 64}}
                },
            }
        )
    )
    table = tmp_path / "block_norms.csv"
    with table.open("w", newline="") as handle:
        csv.writer(handle).writerows([["block", "norm <F>"], ["Q-Q", "1.5e-03"], ["V-V", "2"]])
    config = {"device": "cpu", "experiments": {"e": {"dataset": "digits"}}}
    paths = write_report_pages(str(claims), str(summary), [str(table)], config, str(tmp_path / "out"))
    pages = {p.relative_to(tmp_path / "out").as_posix(): p.read_text() for p in paths}
    assert set(pages) == {
        "claims.html",
        "claims_summary.html",
        "config.html",
        "provenance.html",
        "tables/block_norms.html",
    }
    full = pages["claims.html"]
    assert full.count("<tr>") == len(rows) + 1 and "1 reproduced, 1 not reproduced, 1 not testable" in full
    assert html.escape("claim <0> & text") in full and "claim <0>" not in full  # escaped
    assert (
        pages["claims_summary.html"].count("<tr>") == len(rows) + 1
        and 'id="claims-summary"' in pages["claims_summary.html"]
    )
    assert (
        '<td class="num">1.5e-03</td>' in pages["tables/block_norms.html"]
        and "norm &lt;F&gt;" in pages["tables/block_norms.html"]
    )
    assert "digits" in pages["config.html"] and "cafe01" in pages["config.html"]
    assert "0123abc" in pages["provenance.html"] and "fig3_fig4" in pages["provenance.html"]


def test_settings_argument_reads_inline_json_or_a_file(tmp_path):
    import argparse

    from transformer_hessian.pipeline.cli import _json_arg, build_parser

    path = tmp_path / "spec.json"
    path.write_text('{"a": [1, 2], "b": {"c": null}}')
    assert _json_arg(f"@{path}") == _json_arg('{"a": [1, 2], "b": {"c": null}}') == {"a": [1, 2], "b": {"c": None}}
    with pytest.raises(argparse.ArgumentTypeError, match="cannot read the settings file"):
        _json_arg(f"@{tmp_path / 'missing.json'}")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(argparse.ArgumentTypeError, match="bad.json"):
        _json_arg(f"@{tmp_path / 'bad.json'}")
    args = build_parser().parse_args(["scaling", "aggregate", "--scaling", f"@{path}", "--parts", "x", "--out", "y"])
    assert args.scaling == {"a": [1, 2], "b": {"c": None}}


def test_runguard_names_a_target_taken_for_a_config_file(tmp_path, capsys):
    from transformer_hessian.pipeline.runguard import main, missing_configfiles

    cfg = tmp_path / "c.yaml"
    cfg.write_text("{}")
    assert missing_configfiles(["--configfile", str(cfg), "all", "--cores", "2"]) == ["all"]
    assert missing_configfiles(["--configfile", str(cfg), "--", "all"]) == []
    assert missing_configfiles(["all", "--configfile", str(cfg)]) == []
    assert main(["snakemake", "--directory", str(tmp_path), "--configfile", str(cfg), "claims"]) == 1
    err = capsys.readouterr().err
    assert "'claims' does not exist" in err and "put targets before --configfile" in err
