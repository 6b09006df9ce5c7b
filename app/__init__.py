"""Partitura's service: HTTP API, CLI and persistence. All planning goes through ``solver``."""
