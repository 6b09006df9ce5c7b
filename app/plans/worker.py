"""The function the solver pool runs in a worker process."""

from __future__ import annotations

from typing import Any

from solver.search.request import SearchRequest
from solver.spec.errors import SpecError


def run_search(request: SearchRequest) -> dict[str, Any]:
    """``{"result": SearchResult.to_dict()}``, or ``{"spec_error": {"field", "reason"}}``.

    SpecError does not survive pickling (its constructor takes two arguments), so it travels
    back as data.
    """
    from solver.search.loop import search

    try:
        return {"result": search(request).to_dict()}
    except SpecError as error:
        return {"spec_error": {"field": error.field, "reason": error.reason}}
