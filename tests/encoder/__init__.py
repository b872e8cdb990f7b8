"""Tests of transformer_hessian.encoder (the folder mirrors src/transformer_hessian/)."""
