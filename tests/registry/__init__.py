"""Tests of transformer_hessian.registry (the folder mirrors src/transformer_hessian/)."""
