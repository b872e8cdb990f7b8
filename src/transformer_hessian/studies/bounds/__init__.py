"""The bounds study (beyond the paper): bounds on the spectral norm of the self-attention and
Transformer-block Hessians (arXiv 2510.16927, Theorems 1 and 6, Lemma 4) next to the project's own
proven bounds, evaluated on the Hessian experiment's model at initialisation and after training.
See docs/theory.md ("Theorem 1", "Theorem 6", "Lemma 4").

One module per part (the config section is :class:`transformer_hessian.config.settings.Bounds`):
:mod:`.attention` (Theorem 1 and the project's attention bound), :mod:`.block` (Theorem 6, Lemma 4,
the project's block bounds), :mod:`.pipeline` (the ``bounds`` rule's evaluation), :mod:`.table`
(the table and the Theorem 1/6, Lemma 4 claim rows), :mod:`.result` (the result file),
:mod:`.step` (the two rules' steps), :mod:`.plot` (the figure), :mod:`.cli` (the ``bounds``
command), :mod:`.registry` (the figure and the table); its rules are in
``workflow/rules/studies/bounds.smk``. Theorem 7's right-hand side is
:mod:`transformer_hessian.core.theorem7` (the landscape and probe studies use it). Imports nothing, so
that ``bounds.plot`` and the command line do not import torch.
"""
