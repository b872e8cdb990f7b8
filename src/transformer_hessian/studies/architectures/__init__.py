"""The architecture study (beyond the paper): the Hessian study of Figures 3-5 on torch encoder
layers of several architectures (post- vs pre-norm, 1 vs 4 heads, ReLU vs GELU, 1 vs 2 layers),
trained on the Hessian experiment's data, with the exact Hessian of
:func:`transformer_hessian.encoder.exact_hessian`.

One module per part (the config section and its checks sit in the config layer,
:mod:`transformer_hessian.config.architectures`): :mod:`.compute` (model,
training, Hessian), :mod:`.metrics` (block norms, JS0, off-layer share), :mod:`.result` (the
result file), :mod:`.report` (table, claim rows, summary section), :mod:`.plot` (the figure),
:mod:`.step` (the rules' steps), :mod:`.cli` (the ``architectures`` command)."""
