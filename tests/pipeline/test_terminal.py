"""Folding of snakemake's long terminal lines (transformer_hessian.pipeline.terminal)."""

import logging
import shlex
import subprocess

from conftest import unfold_terminal
from hypothesis import given
from hypothesis import strategies as st

from transformer_hessian.pipeline.terminal import WIDTH, install, wrap_long_lines

NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_./-", min_size=1, max_size=60)


@given(st.lists(NAMES, min_size=1, max_size=120))
def test_file_lists_fold_at_commas_and_lose_nothing(files):
    line = "    input: " + ", ".join(files)
    out = wrap_long_lines(line).split("\n")
    assert all(len(piece) <= WIDTH for piece in out)
    assert " ".join(piece.strip() for piece in out).removeprefix("input: ").split(", ") == files
    assert out[0].startswith("    input:") and all(p.startswith(" " * 11) for p in out[1:])


@given(st.lists(st.tuples(NAMES, st.text(alphabet="ab c'\"\\$;\n", max_size=20)), min_size=1, max_size=40))
def test_shell_commands_fold_between_words_and_still_parse(args):
    cmd = "transformer-hessian --threads 1 probe " + " ".join(f"--{k} {shlex.quote(v)}" for k, v in args)
    out = wrap_long_lines("Shell command: " + cmd)
    # folded only between words: a newline inside a quoted value stays where it was
    assert all(len(line) <= WIDTH for line in out.split("\n"))
    assert out.replace(" \\\n    ", " ") == "Shell command: " + cmd
    # pasted into a shell, the folded command is the same command (bash prints the arguments)
    assert _argv(out.removeprefix("Shell command: ")) == _argv(cmd)


def _argv(cmd: str) -> bytes:
    printing = cmd.replace("transformer-hessian", "printf '%s\\0'", 1)
    return subprocess.run(["bash", "-c", printing], capture_output=True, check=True, timeout=30).stdout


def test_reasons_quoting_long_captions_fold_at_spaces():
    caption = "Figure 6. |L_(k+1)(w*) - L_k(w*)| against the number of training samples k, " * 8
    line = (
        f'    reason: Missing output files: a.json, b.json; Params have changed: before: "{caption}" now: "{caption}"'
    )
    out = wrap_long_lines(line).split("\n")
    assert all(len(piece) <= WIDTH for piece in out) and len(out) > 2
    assert " ".join(p.strip() for p in out).split() == line.split()


@given(st.lists(NAMES, min_size=1, max_size=120), st.lists(NAMES, min_size=1, max_size=60))
def test_the_tests_unfold_gives_back_what_snakemake_printed(inputs, args):
    """tests/conftest.py's unfold_terminal (the tests that parse snakemake's listing use it), on a
    job's info and its shell command, two messages as snakemake logs them."""
    job = "rule train:\n    input: " + ", ".join(inputs) + "\n    output: results/a.json"
    shell = "Shell command: transformer-hessian " + " ".join(args)
    printed = wrap_long_lines(job) + "\n" + wrap_long_lines(shell) + "\n"
    assert unfold_terminal(printed) == job + "\n" + shell + "\n"


def test_short_lines_pass_unchanged():
    text = "rule train:\n    input: a, b\n\nFinished in 1 min 02 s."
    assert wrap_long_lines(text) == text


def test_installed_formatter_folds_and_keeps_the_inner_formatters_state(capsys):
    class Inner(logging.Formatter):
        quiet = {"reason"}

        def format(self, record):
            return "    output: " + ", ".join(f"results/file_{i}.json" for i in range(50))

    logger = logging.getLogger("test_terminal")
    handler = logging.StreamHandler()
    handler.setFormatter(Inner())
    logger.addHandler(handler)
    try:
        install(logger)
        install(logger)  # idempotent: one fold, not two wrappers
        assert handler.formatter.quiet == {"reason"} and not hasattr(handler.formatter.inner, "inner")
        logger.warning("x")
        err = capsys.readouterr().err
        assert max(len(line) for line in err.splitlines()) <= WIDTH and "results/file_49.json" in err
    finally:
        logger.removeHandler(handler)
