"""Tests of transformer_hessian.train (the folder mirrors src/transformer_hessian/)."""
