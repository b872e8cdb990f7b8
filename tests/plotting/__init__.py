"""Tests of transformer_hessian.plotting (the folder mirrors src/transformer_hessian/)."""
