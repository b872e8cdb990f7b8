"""Tests of transformer_hessian.data (the folder mirrors src/transformer_hessian/)."""
