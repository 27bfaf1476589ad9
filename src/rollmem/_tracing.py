"""A fold as an OpenTelemetry span, when the application traces (private).

rollmem never imports OpenTelemetry. A fold is a span once the application has imported
``opentelemetry.trace`` and set a tracer provider (``trace.set_tracer_provider(...)``, or the
``opentelemetry-instrument`` launcher): the span is a child of the span current where the fold
runs, and current itself while ``summarize_fn`` and ``on_evict`` run. Otherwise
:func:`fold_span` costs a dictionary lookup.

An integration that wants a fold in a trace system of its own can wrap :func:`fold_span`: it is
a plain context manager, and the attribute names are the constants below.
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Optional

__all__ = ["MEMORY", "MESSAGES", "SPAN_NAME", "SUMMARY_TOKENS", "TOKENS_AFTER", "TOKENS_BEFORE", "fold_span"]

SPAN_NAME = "rollmem.fold"
MEMORY = "rollmem.memory"
"""The memory's class name (``"RollingMemory"``); the other attributes are integers."""
MESSAGES = "rollmem.fold.messages"
"""How many messages left the buffer (0 when a change made meanwhile discarded the fold)."""
TOKENS_BEFORE = "rollmem.fold.tokens_before"
"""The buffer's tokens just before the fold committed (policies that count tokens only)."""
TOKENS_AFTER = "rollmem.fold.tokens_after"
"""The buffer's tokens once the fold committed."""
SUMMARY_TOKENS = "rollmem.fold.summary_tokens"
"""The new summary's tokens, by the memory's counter (one counter call per traced fold)."""

_OFF: AbstractContextManager[None] = nullcontext()
_tracer: tuple[Any, Any] = (None, None)  # (the provider, its tracer for rollmem)


def fold_span(memory: object) -> AbstractContextManager[Optional[Any]]:
    """A context manager around one fold of ``memory`` (its class name is the :data:`MEMORY`
    attribute): yields the span, current inside the block (``None`` when the application does not
    trace); an exception leaving the block is recorded on the span, whose status is then an
    error. Set attributes with ``span.set_attribute(name, value)``."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return _OFF
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):  # no provider set: spans would go nowhere
        return _OFF
    global _tracer
    known, tracer = _tracer
    if known is not provider:
        version = getattr(sys.modules.get("rollmem"), "__version__", None)
        tracer = provider.get_tracer("rollmem", version)
        _tracer = (provider, tracer)
    span: AbstractContextManager[Any] = tracer.start_as_current_span(
        SPAN_NAME, attributes={MEMORY: type(memory).__name__}
    )
    return span
