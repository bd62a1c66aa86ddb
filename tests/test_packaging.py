"""What the package publishes: the extras its users install, and none of its development's."""

from __future__ import annotations

import configparser
import itertools
import subprocess
import sys
from pathlib import Path

import pytest

import dev

ROOT = Path(__file__).resolve().parents[1]


def _declared_extras() -> list[str]:
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / "setup.cfg")
    return sorted(config["options.extras_require"])


def test_setup_cfg_publishes_only_the_users_extras() -> None:
    assert _declared_extras() == sorted(dev.USER_EXTRAS)
    assert set(dev.USER_EXTRAS) == {
        "django-redis",
        "valkey",
        "hiredis",
        "prometheus",
        "opentelemetry",
    }


def test_every_development_requirement_file_dev_py_installs_exists() -> None:
    installs = [
        *dev.newest_requirements(),
        *dev.oldest_requirements(),
        *dev.django_requirements("5.2"),
    ]
    named = {file for flag, file in itertools.pairwise(installs) if flag == "-r"}
    assert named == {
        f"requirements/{n}.txt" for n in ("test", "test-tasks", "lint", "docs", "package")
    }
    for file in named:
        assert (ROOT / file).read_text().strip(), file


def test_the_built_metadata_offers_only_the_users_extras(tmp_path: Path) -> None:
    """The metadata setuptools builds (PKG-INFO's Provides-Extra, as a wheel's METADATA)."""
    pytest.importorskip("setuptools")
    built = subprocess.run(
        [
            sys.executable,
            "-c",
            "from setuptools import setup; setup()",
            "egg_info",
            "--egg-base",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (info,) = tmp_path.glob("*.egg-info/PKG-INFO")
    assert dev.extras_of(info.read_text()) == sorted(dev.USER_EXTRAS)
