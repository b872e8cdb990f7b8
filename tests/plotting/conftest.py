"""Fixtures of the plotting tests."""

import pytest


@pytest.fixture(autouse=True)
def _theme_and_close_figures():
    """Every test starts from the project's theme and leaves no figure open."""
    import matplotlib.pyplot as plt

    from transformer_hessian import plotting

    plotting.set_theme()
    yield
    plt.close("all")
