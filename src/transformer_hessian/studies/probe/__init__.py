"""Probes of the loss landscape around a trained ``w*``: Theorem 7 off ``w*``, Assumption 1.

Everything here concerns the empirical loss of the paper (arXiv 2510.16927, Sec. 3),
``L_k(w) = (1/k) sum_{i<=k} l_i(w)`` over the first ``k`` samples of an ordering, with
``l_i`` the cross-entropy of sample ``i`` and ``w`` **all** parameters of the model (flattened
in ``model.named_parameters()`` order). All curvature runs in float64 with ``torch.func``.

Pieces (modules :mod:`transformer_hessian.core.krylov` (core: the flat model, HVPs, Lanczos),
:mod:`.theorem7`, :mod:`.assumption1`, :mod:`.compute`, :mod:`.verdicts`; ``docs/theory.md``
explains the choices), plus :mod:`.result` (the result file and the claim rows file), :mod:`.step`,
:mod:`.plot` (Figures 1, 12 and Theorem 7's), :mod:`.cli` (the ``probe`` command) and
:mod:`.registry` (the three figures); its rule is in ``workflow/rules/studies/probe.smk``. Nothing
is imported here (the command line imports this package): import the modules.

* :class:`FlatModel` - the model as a function of one flat parameter vector.
* :func:`lanczos` - batched Lanczos with full reorthogonalisation for extreme eigenpairs of a
  symmetric operator given by matrix-vector products (here Hessian-vector products).
* :func:`top_eigenpair` - the top eigenpair of the Hessian of the mean loss; the direction
  ``u`` of the probes.
* :func:`per_sample_spectral_norms` - ``||H_i(w)||_2`` of per-sample Hessians (vmapped HVPs).
* :func:`directional_derivatives` - ``l_i``, ``d/dt l_i(w + t d)`` and ``d^2/dt^2 l_i(w + t d)``
  at ``t = 0`` for every sample at once (vmapped forward-over-reverse).
* :func:`theorem7_check` - ``|L_{k+1}(w) - L_k(w)|`` on ``w = w* + t d`` against Theorem 7.
* :func:`taylor_check` / :func:`taylor_break` - where the second-order Taylor model of ``L_k``
  breaks.
* :func:`gradient_norms` / :func:`assumption1_analysis` - ``||grad L_k(w*)||`` against ``k``
  (Figure 12), from the Gram matrix of per-sample gradients; :func:`zero_gradient_test` - is
  the floor ``||grad L_n(w*)||`` distinguishable from 0 against sampling noise (the verdict).
* :func:`minimiser_shift` - ``||w*_k - w*_{k+1}||`` from short gradient-descent fine-tunes.
* :func:`run_probe` - the whole protocol on a trained model; :func:`claim_rows` its verdicts.
"""
