"""Operations: liveness, readiness and Prometheus metrics."""
