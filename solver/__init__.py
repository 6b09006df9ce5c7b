"""Partitura's planning library: cost model and optimizer (standard library, numpy, ortools only)."""
