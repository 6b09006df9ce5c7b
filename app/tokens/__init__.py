"""API tokens: hashed at rest, scoped, revocable; the owners of stored resources (docs/auth.md)."""
