"""What a newcomer gets: the sdist builds a wheel that installs and runs the demo, outside the repository.

The sdist is built with this environment's ``hatchling`` (no build isolation, so no network), the
wheel is built from the unpacked sdist (a file missing from the sdist fails here), installed with
``--no-deps`` into a fresh virtual environment, and ``python -m rollmem demo`` and the ``rollmem``
console script run from a scratch directory. It skips where ``build``, ``hatchling`` or ``venv``
is unavailable (``pip install -e ".[dev]"`` brings the first two).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VERSION = re.search(
    r'^__version__ = "([^"]+)"', (ROOT / "src" / "rollmem" / "__init__.py").read_text(encoding="utf-8"), re.M
)


def _run(*command: str | Path, cwd: Path, isolated: bool = False) -> subprocess.CompletedProcess[str]:
    """Run a command; ``isolated`` drops the variables that would let the repository's code leak in."""
    env = dict(os.environ)
    if isolated:
        env = {key: value for key, value in env.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _pip_version() -> tuple[int, ...]:
    try:
        version = importlib.metadata.version("pip")
    except importlib.metadata.PackageNotFoundError:
        return (0,)
    return tuple(int(part) for part in re.findall(r"\d+", version)[:2])


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_sdist_installs_and_runs_the_demo_outside_the_repository(tmp_path: Path) -> None:
    # build and hatchling come with the dev extra; venv is a separate package on some systems
    if importlib.util.find_spec("venv") is None:
        pytest.skip("the venv module is not installed (Debian: apt-get install python3-venv)")
    assert VERSION is not None
    dist = tmp_path / "dist"
    build = [sys.executable, "-m", "build", "--no-isolation", "--outdir", dist]
    _ok(_run(*build, "--sdist", ROOT, cwd=tmp_path))
    (sdist,) = dist.glob("rollmem-*.tar.gz")
    assert sdist.name == f"rollmem-{VERSION.group(1)}.tar.gz"
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
        for needed in (
            "README.md",
            "LICENSE",
            "src/rollmem/data/sample_conversation.jsonl",
            "docs/mkdocs.yml",
        ):
            assert f"{sdist.name[: -len('.tar.gz')]}/{needed}" in names, needed
        if hasattr(tarfile, "data_filter"):
            archive.extractall(tmp_path / "unpacked", filter="data")
        else:  # pragma: no cover (Python 3.9 before 3.9.17)
            archive.extractall(tmp_path / "unpacked")
    (source,) = (tmp_path / "unpacked").iterdir()
    _ok(_run(*build, "--wheel", source, cwd=tmp_path))
    (wheel,) = dist.glob("rollmem-*.whl")

    # This environment's pip installs into the new one (pip >= 22.3 has --python): no pip copied.
    borrow_pip = _pip_version() >= (22, 3)
    venv = tmp_path / "venv"
    created = _run(
        sys.executable, "-m", "venv", *(["--without-pip"] if borrow_pip else []), venv, cwd=tmp_path
    )
    if created.returncode != 0:
        pytest.skip(f"cannot create a virtual environment: {created.stderr.strip()}")
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / "python"
    pip = [sys.executable, "-m", "pip", "--python", python] if borrow_pip else [python, "-m", "pip"]
    _ok(_run(*pip, "install", "-q", "--no-deps", "--no-index", wheel, cwd=tmp_path))

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    location = _ok(_run(python, "-c", "import rollmem; print(rollmem.__file__)", cwd=outside, isolated=True))
    assert Path(location.strip()).is_relative_to(venv)
    demo = _ok(_run(python, "-m", "rollmem", "demo", cwd=outside, isolated=True))
    assert "== stats ==" in demo
    assert "messages replayed          325" in demo
    version = _ok(_run(bindir / "rollmem", "--version", cwd=outside, isolated=True))
    assert version == f"rollmem {VERSION.group(1)}\n"
