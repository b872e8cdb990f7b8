"""Integration: the whole workflow on a tiny config in a temporary folder (the session's one tiny
run, tests/slurm_cluster.py: on the private SLURM cluster where one can be started, else local)."""

import json
import re
import subprocess
import sys

import pytest
import yaml
from tiny_workflow import RUN_CHECKS

# the first test that asks for the run may also start the cluster (apt-get install included)
pytestmark = [pytest.mark.workflow, pytest.mark.timeout(1800)]  # make test-fast leaves these out

# The checks of the finished run (tiny_workflow.py), collected here on the session's tiny run.
globals().update(RUN_CHECKS)


def _snakemake(root, workdir, env, config_args, *args, timeout=900):
    """A local snakemake in the run's folder, with the config of the run (``config_args``)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--snakefile",
            str(root / "Snakefile"),
            "--directory",
            str(workdir),
            *config_args,
            "--cores",
            "2",
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def run(tiny_run):
    return tiny_run.work


def _report_results(html: str) -> dict:
    """The report's ``results`` object: path -> {mime_type, data_uri, category, ...}."""
    m = re.search(r'<script id="results">\s*var results = (.*?);\s*</script>', html, re.S)
    assert m, "no results object in the report"
    return json.loads(m.group(1))


def test_rerun_does_nothing_and_report_builds(run, tiny_run, root, env):
    proc = _snakemake(root, run, env, tiny_run.config_args, "-n")
    assert proc.returncode == 0
    assert "Nothing to be done" in proc.stdout + proc.stderr
    rep = _snakemake(root, run, env, tiny_run.config_args, "--report", str(run / "paper/report.html"))
    assert rep.returncode == 0, rep.stderr[-3000:]
    assert "ERROR/" not in rep.stdout + rep.stderr  # docutils errors in captions
    html = (run / "paper/report.html").read_text(errors="replace")
    assert len(html) > 10_000
    for fig in ("Figure 3", "Figure 6"):
        assert fig in html
    # what the report holds: PNG figures (PDF as a download), every table, claims, config, provenance
    results = _report_results(html)
    mimes = {path: r["mime_type"] for path, r in results.items()}
    from transformer_hessian.registry import figure_ids

    for fig in figure_ids(yaml.safe_load((run / "tiny.yaml").read_text())):
        png = next(p for p in mimes if p.endswith(f"/{fig}.png") or p.endswith(f"{fig}.png"))
        assert mimes[png] == "image/png" and any(p.endswith(f"{fig}.pdf") for p in mimes), fig
    stems = {p.stem for p in (run / "paper/tables").glob("*.csv")}
    assert stems and all(f"results/report/tables/{t}.html" in mimes for t in stems), stems
    for page in ("claims", "config", "provenance"):
        assert mimes[f"results/report/{page}.html"] == "text/html"
    (run / "report_for_browser.html").write_text(html)


# Appended to a copy of the report: once the page has loaded, decode every PNG of the report in
# the browser and write the sizes into <pre id="report-check">. The first page's claims table is
# looked up in the DOM that Chromium dumps after rendering the report's own viewer.
CHECK_SCRIPT = """
<script>
window.addEventListener("load", function () {
  var out = document.createElement("pre"); out.id = "report-check"; document.body.appendChild(out);
  var found = {images: {}};
  Object.keys(results).filter(function (p) { return results[p].mime_type === "image/png"; }).forEach(function (p) {
    var img = new Image();
    img.onload = function () { found.images[p] = [img.naturalWidth, img.naturalHeight]; out.textContent = JSON.stringify(found); };
    img.onerror = function () { found.images[p] = "error"; out.textContent = JSON.stringify(found); };
    img.src = results[p].data_uri;
  });
});
</script>
"""


def _chromium() -> str:
    """The chromium command; installed with apt-get where missing and permitted, else skip."""
    import os
    import shutil

    for name in ("chromium", "chromium-browser"):
        if shutil.which(name):
            return shutil.which(name)
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("no chromium, and no apt-get as root to install Debian's chromium")
    proc = subprocess.run(
        ["apt-get", "install", "-y", "-q", "-o", "DPkg::Lock::Timeout=300", "chromium"],
        capture_output=True,
        text=True,
        timeout=900,
        env={"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )
    if proc.returncode != 0 or not shutil.which("chromium"):
        pytest.skip(f"could not install chromium with apt-get: {proc.stderr.strip()[-300:]}")
    return shutil.which("chromium")


def test_report_renders_in_chromium_with_claims_and_images(run, root, env):
    """The report as a browser shows it (headless Chromium): its first page holds the claims
    table and every PNG in it decodes."""
    report = run / "report_for_browser.html"
    if not report.exists():
        pytest.skip("the report was not built (test_rerun_does_nothing_and_report_builds failed or was not run)")
    chromium = _chromium()
    page = run / "report_check.html"
    page.write_text(report.read_text().replace("</body>", CHECK_SCRIPT + "</body>"))

    def dump(path):  # the DOM after Chromium has run the page's scripts
        return subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
            + ["--virtual-time-budget=30000", "--dump-dom", path.as_uri()],
            capture_output=True,
            text=True,
            timeout=600,
        )

    shown = dump(report)  # the report as it opens
    proc = dump(page)  # the copy that decodes every image
    m = re.search(r'<pre id="report-check">(.*?)</pre>', proc.stdout, re.S)
    assert m, f"chromium rendered no check result (exit {proc.returncode}): {proc.stderr[-2000:]}"
    import html as html_lib

    found = json.loads(html_lib.unescape(m.group(1)))
    claims = json.loads((run / "paper/claims.json").read_text())["claims"]
    # the viewer rendered the first page (workflow/report/workflow.rst) with the claims table
    table = re.search(r'<table id="claims-summary">(.*?)</table>', shown.stdout, re.S)
    assert table, f"the report's first page shows no claims table (exit {shown.returncode}): {shown.stderr[-1000:]}"
    assert table.group(1).count("<tr>") == len(claims) + 1
    assert all(f"<code>{c['id']}</code>" in table.group(1) for c in claims)
    assert f"of {len(claims)} claims" in shown.stdout
    bad = {p: v for p, v in found["images"].items() if v == "error" or min(v) < 100}
    assert found["images"] and not bad, bad
    assert len(found["images"]) >= len(list((run / "paper/figures").glob("*.png")))


def test_lint_is_clean(root, env):
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint", "--snakefile", str(root / "Snakefile"), "--directory", str(root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0
    assert "Congratulations" in proc.stdout + proc.stderr
