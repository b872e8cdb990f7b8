"""Tests of transformer_hessian.util (the folder mirrors src/transformer_hessian/)."""
