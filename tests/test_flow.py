"""The one flow runner: every request performed, results sent back, errors thrown in."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

import pytest

from rollmem._flow import arun, run


def _flow(log: list[str]) -> Generator[str, Any, str]:
    first = yield "a"
    log.append(f"got {first}")
    try:
        yield "boom"
    except KeyError as error:
        log.append(f"caught {error.args[0]}")
    second = yield "b"
    return f"done {second}"


def _perform(request: str) -> str:
    if request == "boom":
        raise KeyError("boom")
    return request.upper()


async def _aperform(request: str) -> str:
    await asyncio.sleep(0)
    return _perform(request)


def test_run_sends_results_and_throws_errors_back() -> None:
    log: list[str] = []
    assert run(_flow(log), _perform) == "done B"
    assert log == ["got A", "caught boom"]


def test_arun_is_the_same_flow_awaited() -> None:
    log: list[str] = []
    assert asyncio.run(arun(_flow(log), _aperform)) == "done B"
    assert log == ["got A", "caught boom"]


def test_an_error_the_flow_does_not_handle_propagates_and_closes_it() -> None:
    closed: list[bool] = []

    def flow() -> Generator[str, Any, None]:
        try:
            yield "x"
        finally:
            closed.append(True)

    def fail(request: str) -> None:
        raise ValueError(request)

    with pytest.raises(ValueError, match="x"):
        run(flow(), fail)
    assert closed == [True]


def test_a_base_exception_goes_back_into_the_flow_too() -> None:
    seen: list[str] = []

    def flow() -> Generator[str, Any, None]:
        try:
            yield "x"
        except BaseException as error:
            seen.append(type(error).__name__)
            raise

    def interrupt(request: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(flow(), interrupt)
    assert seen == ["KeyboardInterrupt"]


def test_a_flow_that_yields_nothing_returns_at_once() -> None:
    def flow() -> Generator[str, Any, int]:
        return 7
        yield "never"  # pragma: no cover

    assert run(flow(), _perform) == 7
    assert asyncio.run(arun(flow(), _aperform)) == 7
