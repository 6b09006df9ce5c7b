"""/v1/profiles: measured per-layer profiles (``partitura-profile/1`` documents) that plan and
evaluation requests may name by ``profile_id``."""
