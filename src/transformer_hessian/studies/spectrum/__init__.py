"""The spectrum study (beyond the paper: Figure 5 for every block of the deep model): matrix-free
curvature of a model too large for a dense Hessian, on one fixed training batch in float64.

One module per part (the config section is :class:`transformer_hessian.config.settings.Spectrum`):
:mod:`.compute` (Lanczos top eigenvalues, Hutchinson traces, SLQ densities, block-pair norms, the
summary section), :mod:`.result` (the result file), :mod:`.step` (the rule's step), :mod:`.plot`
(the figure and its table), :mod:`.cli` (the ``spectrum`` command), :mod:`.registry` (its figure);
its rules are in ``workflow/rules/studies/spectrum.smk``."""
