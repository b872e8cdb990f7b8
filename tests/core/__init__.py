"""Tests of transformer_hessian.core (the folder mirrors src/transformer_hessian/)."""
