"""What the benchmarks need from the frameworks beyond their public objects."""

from __future__ import annotations

from typing import Any


def _strands_model(stream: Any) -> Any:
    """A Strands ``Model`` whose ``stream`` is ``stream`` (the rest does nothing)."""
    from strands.models.model import Model

    class Base(Model):  # type: ignore[misc]
        def update_config(self, **config: Any) -> None:
            pass

        def get_config(self) -> Any:
            return {}

        async def structured_output(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError
            yield  # pragma: no cover

    return type("Scripted", (Base,), {"stream": stream})()


def unused_strands_model() -> Any:
    """A Strands ``Model`` that is never called: a real ``Agent`` needs one, and the benchmarks
    drive its conversation manager directly (``apply_management``), not model calls."""

    async def stream(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError
        yield  # pragma: no cover

    return _strands_model(stream)


def answering_strands_model() -> Any:
    """A Strands ``Model`` that answers every request at once with a short text (a model call
    that costs next to nothing, so a benchmark sees the conversation manager's share)."""

    async def stream(self: Any, messages: Any, *args: Any, **kwargs: Any) -> Any:
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockDelta": {"delta": {"text": f"a{len(messages)} w1 w2 w3 w4 w5 w6 w7"}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "end_turn"}}

    return _strands_model(stream)
