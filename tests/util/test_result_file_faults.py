"""Result files verified before use (fault injection): a hand-edited
metrics.json and a truncated or garbage .npz are refused by transformer_hessian.util.io with one message
naming the file and the rule that writes it.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from fault_helpers import _truncate


def test_edited_result_is_named_not_believed(tmp_path):
    """Result files carry a digest recorded by the writer; a hand-edited metrics.json is refused."""
    from transformer_hessian.util.io import ResultError, load_metrics, save_metrics

    path = tmp_path / "metrics.json"
    save_metrics(path, {"experiment": "x", "final": {"val_acc": 0.31}})
    assert load_metrics(path)["final"]["val_acc"] == 0.31
    path.write_text(path.read_text().replace("0.31", "0.99"))
    with pytest.raises(ResultError, match=r"metrics\.json' was changed after the train rule wrote it"):
        load_metrics(path)


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_damaged_npz_result_is_named(damage, tmp_path):
    """A truncated or garbage .npz is one message naming the file and the rule (no BadZipFile,
    no hint about allow_pickle), with or without its digest file."""
    from transformer_hessian.util.io import ResultError, digest_path, load_hessian, save_hessian

    path = tmp_path / "init.npz"
    save_hessian(path, np.eye(3), ["a"], np.array([0, 3]), np.array([[3, 1]]))
    if damage == "truncated":
        _truncate(path)
    else:
        path.write_bytes(os.urandom(3000))
    with pytest.raises(ResultError, match=r"init\.npz.*rerun the hessian rule"):
        load_hessian(path)
    digest_path(path).unlink()
    with pytest.raises(ResultError, match=r"init\.npz' is not a readable \.npz .*rerun the hessian rule") as err:
        load_hessian(path)
    assert "allow_pickle" not in str(err.value)
