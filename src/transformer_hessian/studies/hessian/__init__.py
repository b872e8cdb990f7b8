"""The Hessian study (paper, Section 5, Figures 3-5): the exact dense Hessian of one block's five
weight groups at initialisation and after training, on one fixed training batch in float64, its
block and weight norms, and the check of the saved Hessian against curvlinops products (the gate
of every Hessian figure).

One module per part (the config sections are :class:`transformer_hessian.config.settings.Hessian` and the
``theory`` keys): :mod:`.step` (the ``hessian`` and ``theory`` rules' steps), :mod:`.cli` (the two
commands), :mod:`.registry` (Figures 3-5), :mod:`.result` (the rules' path templates, ``OUTPUTS``); its rules are in ``workflow/rules/studies/hessian.smk``.
The computation is shared mathematics below the studies (:mod:`transformer_hessian.core.hessian`,
:mod:`transformer_hessian.core.checks`), and so are the formats of the result files (``save_hessian`` /
``load_hessian``, ``save_norms`` / ``load_norms``, ``save_theory_check`` / ``load_theory_check`` in
:mod:`transformer_hessian.util.io`): the bounds and dynamics studies and the report read them too."""
