"""The progress lines of long rules: on the log and, under snakemake (stderr sent to a log
file), on stdout, which is snakemake's terminal."""

from __future__ import annotations

import io
import subprocess
import sys
import time

from transformer_hessian.util.progress import Progress, format_seconds


def test_format_seconds():
    assert [format_seconds(s) for s in (0, 42.4, 65, 3599, 3720)] == [
        "0 s",
        "42 s",
        "1 min 05 s",
        "59 min 59 s",
        "1 h 02 min",
    ]


def test_lines_carry_step_total_and_time_left():
    out = io.StringIO()
    with Progress("demo", total=4, unit="step", every=0.05, stream=out) as p:
        time.sleep(0.12)  # before the first step: no estimate yet
        for i in range(4):
            time.sleep(0.06)
            p.advance(note=f"item {i}")
            if i == 1:
                line = p.line()
                assert line.startswith("demo: step 2/4 (50 %)") and "left" in line and "[item 1]" in line
                time.sleep(0.3)
    lines = out.getvalue().splitlines()
    assert lines[0] == "[progress] demo: 4 step(s) to do"
    assert any("step 0/4" in x and "time left not known yet" in x for x in lines)
    assert any("step 2/4 (50 %)" in x and "about" in x and "left" in x for x in lines)  # from the thread
    assert lines[-1].startswith("[progress] demo: done, 4/4 step(s) in ")


def test_failure_is_reported_and_thread_stops():
    out = io.StringIO()
    try:
        with Progress("demo", total=3, every=10, stream=out) as p:
            p.advance()
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert out.getvalue().splitlines()[-1].startswith("[progress] demo: stopped at step 1/3 after")
    assert not p._thread.is_alive()


def test_reaches_stdout_when_stderr_goes_to_a_log(tmp_path):
    code = (
        "import time\n"
        "from transformer_hessian.util.env import setup_logging\n"
        "from transformer_hessian.util.progress import Progress\n"
        "setup_logging()\n"
        "with Progress('job', total=2, every=0.05) as p:\n"
        "    time.sleep(0.2); p.advance(); time.sleep(0.2); p.advance()\n"
    )
    log = tmp_path / "job.log"
    with open(log, "w") as err:
        run = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=err, text=True, check=True)
    assert "[progress] job: step 1/2 (50 %)" in run.stdout and "[progress] job: done, 2/2" in run.stdout
    text = log.read_text()
    assert "job: step 1/2 (50 %)" in text and "job: done, 2/2" in text
    # stdout and stderr on the same file (a plain terminal): each line once, through the log only
    both = tmp_path / "both.log"
    with open(both, "w") as fh:
        subprocess.run([sys.executable, "-c", code], stdout=fh, stderr=fh, check=True)
    assert "[progress]" not in both.read_text() and both.read_text().count("job: done, 2/2") == 1
