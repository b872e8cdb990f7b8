"""Tests of transformer_hessian.pipeline (the folder mirrors src/transformer_hessian/)."""
