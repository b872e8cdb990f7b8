"""Tests of transformer_hessian.config.validate, config_yaml, config_checks, settings and settings_base."""
