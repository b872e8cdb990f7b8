"""Convergence of the empirical loss as data are added (paper's Figure 6, Theorem 7).

Protocol
--------
Given the per-sample losses ``l_1 .. l_n`` of a trained model at its weights ``w*``, the
empirical loss over the first ``k`` samples of an ordering is ``L_k = (1/k) sum_{i<=k} l_i``
and the quantity the paper plots is ``D_k = |L_{k+1} - L_k|`` for ``k = 1 .. n-1``.

* ``D_k`` is computed for ``R`` random orderings of the samples (one seeded
  :class:`numpy.random.Generator`), through the exact identity behind Theorem 7,

      L_{k+1} - L_k = (l_{k+1} - L_k) / (k + 1),

  with ``L_k`` from a cumulative sum of the centred losses (``D_k`` does not change when
  every loss is shifted by the same amount). This is vectorised over orderings and is more
  accurate than subtracting two nearly equal running means.
* The curve that is analysed is the mean of ``D_k`` over the orderings (``D_mean``).
* The paper's earlier code smoothed the curve with an exponential moving average of factor
  0.99. :func:`.compute.ema` reproduces it on ``D_mean``: ``ema_1 = x_1`` and
  ``ema_k = f ema_{k-1} + (1 - f) x_k``. Because the average starts at the first value instead
  of at zero there is no start-up bias towards zero, so **no bias correction** is applied (the
  Adam-style correction ``/(1 - f^k)`` is only right for a zero-initialised average). Note that
  an EMA over the index ``k`` lags a steeply falling curve: for ``k`` below roughly
  ``1/(1-f)`` (100 for ``f = 0.99``) it is dominated by the first values and sits above the
  raw mean. The EMA is stored (``D_ema``) but Figure 6 no longer draws it (see
  :func:`transformer_hessian.core.stats.log_binned_median`); the fit uses the raw mean.
* The rate is a least-squares fit of ``log D_mean`` against ``log k`` (natural logarithms)
  over ``k_min <= k <= k_max`` (default ``k >= 10``: the first few points are dominated by the
  first samples' individual losses). Points where ``D_mean`` is 0 are left out of the fit.
  Every ``k`` of the full curve is used, so large ``k`` dominate the fit, which is where the
  asymptotic rate is defined. Theorem 7 predicts ``D_k = O(1/k)``, i.e. a slope near -1.
* Uncertainty: a percentile bootstrap over orderings. Each of ``B`` replicates draws ``R``
  orderings with replacement, averages their ``D_k`` curves, and refits; the interval is the
  2.5 and 97.5 percentiles of the ``B`` slopes. It therefore measures how much the slope
  depends on the particular orderings drawn (not the sampling of the data set itself).
* Theorem 7 at ``w = w*``: with ``0 <= l_i <= L`` the Taylor term ``M ||w - w*||^2`` vanishes
  and ``D_k <= 2L/(k+1)``; ``L`` is taken as ``max_i l_i``. The check is made on every
  ordering and every ``k``. (From the identity above, nonnegative losses even give
  ``D_k <= L/(k+1)``: ``bound_max_ratio``, the largest ``D_k (k+1) / (2L)``, is at most 1/2.)

* Batch granularity (the paper's "add data batch-by-batch"): with batch size ``b`` the
  same orderings are cut into ``m = n // b`` consecutive batches (a last partial batch is
  dropped); after ``j`` batches the empirical loss is the mean over the first ``j b`` samples,
  ``L_(jb)``, and the batch-wise curve is ``D^b_j = |L_((j+1)b) - L_(jb)|`` for
  ``j = 1 .. m-1``, drawn against the number of samples ``k = j b``.
  :func:`transformer_hessian.core.theorem7.batch_loss_differences` computes it; :func:`.compute.analyse_landscape` stores it under
  ``"batch"`` next to the per-sample curve, with its own fit and bootstrap interval (fit
  over ``j b >= k_min``). The identity above becomes
  ``L_((j+1)b) - L_(jb) = (mean of batch j+1 - L_(jb)) / (j + 1)``, so at ``w*`` the
  Theorem 7 bound reads ``D^b_j <= 2L/(j+1)`` in the number of batches ``j``.
* Display smoother: :func:`transformer_hessian.core.stats.log_binned_median`, the median of ``D_mean`` in log-spaced bins of
  ``k``. It is honest on log axes (every decade gets the same number of bins, and a median
  inside a bin cannot lag the curve), unlike the EMA over the index ``k``.

The computation is pure NumPy/SciPy; only the step (the model's losses) needs PyTorch.

One module per part (the config section is :class:`transformer_hessian.config.settings.Landscape`):
:mod:`.compute` (:func:`~.compute.analyse_landscape`, the EMA), :mod:`.result` (the result file,
the curve the ``fig6_slope`` verdict uses), :mod:`.step` (the rule's step), :mod:`.cli` (the
``landscape`` command), :mod:`.registry` (Figure 6) and :mod:`.plot` (its drawing helpers);
its rule is in ``workflow/rules/studies/landscape.smk``. ``D_k`` and ``D^b_j`` on random orderings and Theorem
7's right-hand side are in :mod:`transformer_hessian.core.theorem7`, the log-log slope, its bootstrap
interval, the log-binned median and the thinning for the JSON result in
:mod:`transformer_hessian.core.stats` (the probe and scaling studies share them). Imports nothing.
"""
