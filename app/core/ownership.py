"""Who is asking, as the services see it: which owner new rows record, and which rows the caller
may see. Built from the request's API token by ``app.core.auth``; the CLI and a service with
authentication off use ``ANYONE`` (no owner recorded, every row visible), as before tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select


@dataclass(frozen=True)
class Access:
    """``owner``: the token id that rows created by this caller record (None: no token).
    ``sees_all``: the caller reads every row (an admin token, or authentication off); otherwise
    only rows whose owner is ``owner``."""

    owner: str | None
    sees_all: bool

    def can_see(self, row_owner: str | None) -> bool:
        return self.sees_all or (self.owner is not None and row_owner == self.owner)

    def visible(self, query: Select, owner_column: Any) -> Select:
        """``query`` restricted to the rows this caller may see."""
        return query if self.sees_all else query.where(owner_column == self.owner)


# Authentication off (local use, the CLI): nothing is owned, everything is visible.
ANYONE = Access(owner=None, sees_all=True)
