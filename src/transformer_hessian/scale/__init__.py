"""Curvature at scale: spectra, traces and per-block norms of a model's exact Hessian over a whole
data set, on one or many processes (``torch.distributed``), resumable (:mod:`.run`); where the
model and its batches come from (:mod:`.sources`); the ``curvature`` command (:mod:`.command`)."""
