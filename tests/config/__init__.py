"""Tests of transformer_hessian.config, config_yaml, config_checks, settings and settings_base."""
