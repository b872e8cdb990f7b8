"""Tests of transformer_hessian.theory (the folder mirrors src/transformer_hessian/)."""
