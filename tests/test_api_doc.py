"""docs/api.md, the public API's page, runs as a doctest: every example there executes and checks
itself (against autograd or a dense Hessian where there is one), and every public name has one."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

import transformer_hessian as th

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"


@pytest.mark.slow  # about 5 s
def test_api_page_examples_run():
    result = doctest.testfile(str(DOC), module_relative=False, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.attempted > 40
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {DOC} failed"


def test_every_public_name_is_documented_and_used_in_an_example():
    text = DOC.read_text()
    used = set(re.findall(r"\bth\.(\w+)", text))
    for name in th.__all__:
        if name.isupper():
            continue  # the group-name constants
        assert f"`{name}" in text, f"{name} is not documented in {DOC}"
        assert name in used, f"{name} has no example in {DOC}"


def test_public_names_resolve_and_old_paths_name_the_new_one():
    import importlib
    import warnings

    for name in th.__all__:
        assert getattr(th, name) is not None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = importlib.import_module("transformer_hessian.bounds")
    assert old.block_bound is th.block_bound
    assert any("transformer_hessian.studies.bounds.block" in str(w.message) for w in caught)
