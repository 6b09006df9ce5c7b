"""The plan viewer: HTML pages of stored plans (``/plans``, ``/plans/{id}``) with inline SVG
charts drawn on the server from the stored plan's JSON; no script, no asset from another host."""
