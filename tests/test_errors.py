from __future__ import annotations

from pathlib import Path

import pytest

from rollmem import errors
from rollmem.errors import (
    ConflictError,
    InvalidStateError,
    MissingExtraError,
    RollmemError,
    StateTypeError,
    StoreUnavailableError,
)


def test_all_is_exact() -> None:
    assert sorted(errors.__all__) == [
        "ConflictError",
        "InvalidStateError",
        "MissingExtraError",
        "RollmemError",
        "StateTypeError",
        "StoreUnavailableError",
    ]


@pytest.mark.parametrize(
    ("cls", "bases"),
    [
        (InvalidStateError, (RollmemError, ValueError)),
        (StateTypeError, (InvalidStateError, RollmemError, ValueError, TypeError)),
        (ConflictError, (RollmemError,)),
        (StoreUnavailableError, (RollmemError,)),
        (MissingExtraError, (RollmemError, ImportError)),
    ],
)
def test_tree(cls: type, bases: tuple[type, ...]) -> None:
    for base in bases:
        assert issubclass(cls, base)
    assert issubclass(RollmemError, Exception)


def test_invalid_state_error_names_the_path() -> None:
    err = InvalidStateError("buffer[3].role", "missing required key")
    assert err.path == "buffer[3].role"
    assert err.problem == "missing required key"
    assert str(err) == "buffer[3].role: missing required key"


def test_invalid_state_error_at_the_root_is_just_the_problem() -> None:
    err = StateTypeError("", "expected a mapping, got list")
    assert err.path == ""
    assert str(err) == "expected a mapping, got list"
    with pytest.raises(TypeError, match=r"^expected a mapping, got list$"):
        raise err


def test_missing_extra_error_says_what_to_install() -> None:
    err = MissingExtraError("tiktoken", "tiktoken", "tiktoken_counter")
    assert str(err) == "tiktoken_counter needs the 'tiktoken' package: pip install \"rollmem[tiktoken]\""
    assert err.package == "tiktoken"
    assert err.extra == "tiktoken"
    assert err.name == "tiktoken"
    with pytest.raises(ImportError):
        raise err


def test_import_extra_names_the_extra_only_when_its_own_package_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rollmem._extras import import_extra, missing_extra

    expected = r"^f needs the 'absent-dist' package: pip install \"rollmem\[x\]\"$"
    with pytest.raises(MissingExtraError, match=expected):
        import_extra("rollmem_absent_package.sub", package="absent-dist", extra="x", feature="f")
    # a package that is installed but imports something missing: a broken install, said as it is
    (tmp_path / "rollmem_broken_package").mkdir()
    (tmp_path / "rollmem_broken_package" / "__init__.py").write_text("import rollmem_not_there\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as info:
        import_extra("rollmem_broken_package", package="broken", extra="x", feature="f")
    assert not isinstance(info.value, MissingExtraError)
    assert info.value.name == "rollmem_not_there"
    assert missing_extra(info.value, {"rollmem_broken_package": "broken"}, extra="x", feature="f") is None
    found = missing_extra(info.value, {"rollmem_not_there": "dist"}, extra="x", feature="f")
    assert isinstance(found, MissingExtraError)
    assert found.package == "dist"
