"""The causal language-model study (beyond the paper): the paper's claims on the Hessian's blocks,
Figure 6, Theorem 7 and Assumption 1 on a GPT-style decoder trained on byte tokens of real text,
a scaling law L(N, D) with the curvature of every model of the grid, and the error of the
curvature approximations against the exact Hessian. Rules in ``workflow/rules/studies/lm.smk``,
config section ``lm`` (``config/lm.yaml``: the study at full size)."""
