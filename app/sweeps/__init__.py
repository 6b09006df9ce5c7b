"""Sweeps: many plan requests over GPU counts, clusters and batch sizes, and their scaling curves."""
