"""What the benchmarks need from the frameworks beyond their public objects."""

from __future__ import annotations

from typing import Any


def unused_strands_model() -> Any:
    """A Strands ``Model`` that is never called: a real ``Agent`` needs one, and the benchmarks
    drive its conversation manager directly (``apply_management``), not model calls."""
    from strands.models.model import Model

    class Unused(Model):  # type: ignore[misc]
        def update_config(self, **config: Any) -> None:
            pass

        def get_config(self) -> Any:
            return {}

        async def structured_output(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

        async def stream(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError
            yield  # pragma: no cover

    return Unused()


def answering_strands_model() -> Any:
    """A Strands ``Model`` that answers every request at once with a short text (a model call
    that costs next to nothing, so a benchmark sees the conversation manager's share)."""
    from strands.models.model import Model

    class Answering(Model):  # type: ignore[misc]
        def update_config(self, **config: Any) -> None:
            pass

        def get_config(self) -> Any:
            return {}

        async def structured_output(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError
            yield  # pragma: no cover

        async def stream(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            yield {"messageStart": {"role": "assistant"}}
            text = f"a{len(messages)} w1 w2 w3 w4 w5 w6 w7"
            yield {"contentBlockDelta": {"delta": {"text": text}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}

    return Answering()
