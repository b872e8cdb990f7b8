"""Tests of transformer_hessian.claims (the folder mirrors src/transformer_hessian/)."""
