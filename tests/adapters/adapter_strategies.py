"""Hypothesis strategies shared by the adapter tests (imported as a plain module: pytest puts this
folder on sys.path)."""

from __future__ import annotations

import json

from hypothesis import strategies as st

# A fixed alphabet (JSON-sensitive and non-ASCII characters included) spares Hypothesis building its
# Unicode tables, which on a fresh checkout trips the too_slow health check.
ALPHABET = 'ab Z09_\n\t"\\{}[]:,é中😀\x00'
TEXT = st.text(alphabet=ALPHABET, max_size=10)
NONEMPTY = st.text(alphabet=ALPHABET, min_size=1, max_size=10)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)


def compact_objects(min_size: int = 0) -> st.SearchStrategy[str]:
    """Tool-call arguments in the form the adapters write back: compact JSON objects."""
    return st.dictionaries(TEXT, JSON, min_size=min_size, max_size=3).map(
        lambda obj: json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    )
