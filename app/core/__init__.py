"""Cross-cutting pieces of the service: settings, database, problem documents, metrics, solver pool."""
