"""Tests of src/transformer_hessian/studies/, one file per study."""
