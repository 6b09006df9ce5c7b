"""Catalog: built-in GPUs, models and clusters, and custom models and clusters."""
