"""Bounds of the paper (arXiv 2510.16927) evaluated against measured curvature."""
