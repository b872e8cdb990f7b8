"""The scaling study (beyond the paper: Figure 1's sample size determination and Theorem 7 across
model sizes): a sweep of post-norm ViTs (widths at a fixed depth, depths at a fixed width), per
model the D_k curve, its slope and prefactor, the sample size k*, the top Hessian eigenvalue at w*
and block norms; across models, power laws in the parameter count. On only with
``scaling.enabled``.

One module per part (the config section is :class:`transformer_hessian.config.settings.Scaling`):
:mod:`.compute` (the sweep, one model, the aggregate and fits), :mod:`.result` (the result files
and the summary section), :mod:`.step` (the two rules' steps), :mod:`.plot` (the figure),
:mod:`.cli` (the ``scaling`` command), :mod:`.registry` (its figure); its rules are in
``workflow/rules/studies/scaling.smk``."""
