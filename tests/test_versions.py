"""The solver fingerprint stored with every plan covers the whole cost model and optimizer."""

from __future__ import annotations

from pathlib import Path

import solver
from app.core import versions


def test_fingerprint_covers_every_solver_subpackage():
    root = Path(solver.__file__).parent
    hashed = {path.relative_to(root).as_posix() for path in versions.solver_sources()}
    on_disk = {path.relative_to(root).as_posix() for path in root.rglob("*.py")}
    assert hashed == on_disk
    for required in ("cost/evaluate.py", "cost/stage.py", "partition/problem.py", "search/loop.py", "spec/parallel.py"):
        assert required in hashed


def test_fingerprint_changes_when_a_nested_solver_file_changes(monkeypatch, tmp_path):
    before = versions.current_versions().solver
    fake_root = tmp_path / "solver"
    for path in versions.solver_sources():
        target = fake_root / path.relative_to(Path(solver.__file__).parent)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    monkeypatch.setattr(solver, "__file__", str(fake_root / "__init__.py"))
    assert versions.current_versions().solver == before  # same files, same digest
    (fake_root / "cost" / "stage.py").write_text((fake_root / "cost" / "stage.py").read_text() + "\n# changed\n")
    assert versions.current_versions().solver != before


def test_fingerprint_is_sha256_of_each_path_and_content_in_path_order():
    """The digest stored with every plan keeps its definition (stored plans of the same sources
    stay equal to new ones): each file's path below the package, then its bytes, in path order."""
    import hashlib

    root = Path(solver.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix()):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    assert versions.current_versions().solver.endswith("+" + digest.hexdigest()[:12])
