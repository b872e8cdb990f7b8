"""The dynamics study (paper, Appendix A.1, Figures 7-11): weights, norms and Hessian blocks of the
one-block model during the first training steps, replayed from its init checkpoint.

One module per part (the config section is :class:`transformer_hessian.config.settings.Dynamics`):
:mod:`.compute` (the replay and the snapshots), :mod:`.result` (the result files), :mod:`.step`
(the rule's step), :mod:`.plot` (Figures 7-11), :mod:`.cli` (the ``dynamics`` command),
:mod:`.registry` (the five figures); its rule is in ``workflow/rules/studies/dynamics.smk``."""
