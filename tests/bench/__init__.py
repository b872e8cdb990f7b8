"""Tests of transformer_hessian.bench (the Hessian and training benchmarks)."""
