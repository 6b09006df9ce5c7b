"""Plans: searched parallel configurations, stored and idempotent."""
