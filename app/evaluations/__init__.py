"""Evaluations: one configuration evaluated, no search."""
