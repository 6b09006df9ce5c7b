"""The lock files (`make lock`) pin every dependency of pyproject.toml at the version it names,
with hashes, so `pip install --require-hashes` installs exactly the tree that was locked."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
LOCKS = {"requirements.lock": [], "requirements-dev.lock": sorted(PYPROJECT["optional-dependencies"])}


def locked(name: str) -> dict[str, tuple[Version, list[str]]]:
    """{package: (version, hashes)} of a lock file written by uv pip compile --generate-hashes."""
    text = re.sub(r"\\\n", " ", (REPO / name).read_text())
    pins: dict[str, tuple[Version, list[str]]] = {}
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        requirement, *options = line.split(" --hash=")
        spec = requirement.split(";", 1)[0].strip()
        package, _, version = spec.partition("==")
        assert version, f"{name}: {spec!r} is not pinned with =="
        pins[canonicalize_name(package)] = (Version(version), [o.strip() for o in options])
    return pins


def declared(extras: list[str]) -> list[Requirement]:
    requirements = [Requirement(r) for r in PYPROJECT["dependencies"]]
    for extra in extras:
        requirements += [Requirement(r) for r in PYPROJECT["optional-dependencies"][extra]]
    return requirements


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_every_locked_package_is_pinned_with_a_hash(lock):
    pins = locked(lock)
    assert pins
    for package, (_, hashes) in pins.items():
        assert hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), f"{lock}: {package} has no sha256 hash"


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_the_lock_pins_every_pyproject_dependency_at_its_version(lock):
    """A dependency added to or moved in pyproject.toml without `make lock` fails here."""
    pins = locked(lock)
    for requirement in declared(LOCKS[lock]):
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{lock} lacks {requirement.name}: run `make lock`"
        version, _ = pins[name]
        # == in pyproject matches a local build (torch 2.13.0+cpu) of the same release, as pip does.
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{lock} pins {requirement.name} {version}, pyproject.toml asks {requirement.specifier}: run `make lock`"
        )


def test_the_service_installs_the_same_versions_from_either_lock():
    service, dev = locked("requirements.lock"), locked("requirements-dev.lock")
    differ = {p: (str(v), str(dev[p][0])) for p, (v, _) in service.items() if p in dev and dev[p][0] != v}
    assert not differ, f"the two locks disagree (service, dev): {differ}"
