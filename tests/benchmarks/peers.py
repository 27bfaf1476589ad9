"""The memories under comparison, each behind the same small driver interface.

Every peer is built with the same budget, the same token counter and a :class:`FakeSummarizer`, and is
fed the same workload messages (converted to its own message type before any timing). One ``add`` is
what a chat server does per message to keep the memory within budget:

- rollmem ``RollingMemory``: ``add_message(role, content, tool_calls=..., tool_call_id=...)`` (builds
  and validates the ``Message``; conservative: the other peers get pre-built message objects).
- LangChain classic ``ConversationSummaryBufferMemory``: ``chat_memory.add_message(m)`` then ``prune()``
  (what ``save_context`` does for each input/output pair). Its LLM is :class:`_langchain_llm` below:
  ``get_num_tokens`` is the shared counter, the completion is the canned summary, and the prompt is
  ``"{summary}\\n{new_lines}"`` so the tokens sent are the summary plus the evicted lines only.
- LlamaIndex ``ChatSummaryMemoryBuffer``: ``put(m)`` then ``get()`` (it only prunes and summarizes in
  ``get``, which a chat engine calls every turn); ``tokenizer_fn`` wraps the shared counter.
- naive: append, count every buffered message again, drop the oldest until within budget, one
  summarizer call for what was dropped.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from typing import Any, Callable, Optional

from counters import Counter

from rollmem import ASSISTANT, SYSTEM, TOOL, USER, Message, RollingMemory

CANNED_SUMMARY = (
    "Summary so far: the user asked about orders, refunds and a delayed shipment; the assistant looked "
    "up the account, ran two queries and booked a follow-up meeting for Tuesday at ten."
)


class FakeSummarizer:
    """Stands in for the LLM: counts calls and (with ``measure``) the tokens of each prompt it gets."""

    def __init__(self, measure: Optional[Counter] = None) -> None:
        self.measure = measure
        self.calls = 0
        self.tokens = 0

    def record(self, prompt: str) -> str:
        self.calls += 1
        if self.measure is not None:
            self.tokens += self.measure(prompt)
        return CANNED_SUMMARY

    def rollmem_fn(self, summary: str, messages: Sequence[Message]) -> str:
        """A ``summarize_fn`` rendering the prompt a real one would: old summary, then the turns."""
        return self.record(summary + "\n" + "\n".join(str(m) for m in messages))


class Peer:
    """Driver interface: ``convert`` once, ``prefill`` without pruning, then ``add`` one message."""

    def convert(self, messages: Sequence[Message]) -> list[Any]:
        return list(messages)

    def prefill(self, natives: Sequence[Any]) -> None:
        raise NotImplementedError

    def add(self, native: Any) -> None:
        raise NotImplementedError

    def buffer_tokens(self, counter: Counter) -> int:
        """The verbatim buffer's size as this peer measures it against its budget (summary excluded)."""
        raise NotImplementedError

    def buffer_len(self) -> int:
        raise NotImplementedError


class RollmemPeer(Peer):
    def __init__(
        self,
        max_tokens: int,
        counter: Counter,
        summarizer: FakeSummarizer,
        target_tokens: Optional[int] = None,
    ) -> None:
        self.memory = RollingMemory(max_tokens, summarizer.rollmem_fn, counter, target_tokens=target_tokens)

    def prefill(self, natives: Sequence[Message]) -> None:
        self.memory.extend(natives)

    def add(self, native: Message) -> None:
        self.memory.add_message(
            native.role, native.content, tool_calls=native.tool_calls, tool_call_id=native.tool_call_id
        )

    def buffer_tokens(self, counter: Counter) -> int:
        return sum(counter(m.token_text()) for m in self.memory.buffer)

    def buffer_len(self) -> int:
        return len(self.memory.buffer)


class NaivePeer(Peer):
    def __init__(self, max_tokens: int, counter: Counter, summarizer: FakeSummarizer) -> None:
        self.max_tokens = max_tokens
        self.counter = counter
        self.summarize = summarizer.rollmem_fn
        self.summary = ""
        self.buffer: list[Message] = []

    def prefill(self, natives: Sequence[Message]) -> None:
        self.buffer.extend(natives)

    def add(self, native: Message) -> None:
        buffer = self.buffer
        buffer.append(native)
        costs = [self.counter(m.token_text()) for m in buffer]
        total = sum(costs)
        cut = 0
        while total > self.max_tokens and cut < len(buffer) - 1:
            total -= costs[cut]
            cut += 1
        if cut:
            self.summary = self.summarize(self.summary, buffer[:cut])
            del buffer[:cut]

    def buffer_tokens(self, counter: Counter) -> int:
        return sum(counter(m.token_text()) for m in self.buffer)

    def buffer_len(self) -> int:
        return len(self.buffer)


def _langchain_llm(counter: Counter, summarizer: FakeSummarizer) -> Any:
    from langchain_core.language_models.llms import LLM

    class FakeSummaryLLM(LLM):
        """Offline LLM: token counts from the shared counter, completions from the fake summarizer."""

        count: Callable[[str], int]
        summarizer: Any

        @property
        def _llm_type(self) -> str:
            return "rollmem-bench-fake"

        def _call(self, prompt: str, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> str:
            return str(self.summarizer.record(prompt))

        def get_num_tokens(self, text: str) -> int:
            return self.count(text)

    return FakeSummaryLLM(count=counter, summarizer=summarizer)


class LangChainPeer(Peer):
    def __init__(self, max_tokens: int, counter: Counter, summarizer: FakeSummarizer) -> None:
        from langchain_classic.memory import ConversationSummaryBufferMemory
        from langchain_core.prompts import PromptTemplate

        with warnings.catch_warnings():  # after the import: LangChain sets its own filters then
            warnings.simplefilter("ignore")  # the class is deprecated in favour of agents
            self.memory = ConversationSummaryBufferMemory(
                llm=_langchain_llm(counter, summarizer),
                max_token_limit=max_tokens,
                prompt=PromptTemplate.from_template("{summary}\n{new_lines}"),
                return_messages=True,
            )
        self.history = self.memory.chat_memory

    def convert(self, messages: Sequence[Message]) -> list[Any]:
        from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

        out: list[Any] = []
        for m in messages:
            if m.role == USER:
                out.append(HumanMessage(m.content))
            elif m.role == ASSISTANT:
                calls = [
                    {"name": c.name, "args": json.loads(c.arguments), "id": c.id, "type": "tool_call"}
                    for c in m.tool_calls
                ]
                out.append(AIMessage(m.content, tool_calls=calls))
            elif m.role == TOOL:
                out.append(ToolMessage(m.content, tool_call_id=m.tool_call_id or ""))
            else:
                out.append(SystemMessage(m.content))
        return out

    def prefill(self, natives: Sequence[Any]) -> None:
        self.history.add_messages(natives)

    def add(self, native: Any) -> None:
        self.history.add_message(native)
        self.memory.prune()

    def buffer_tokens(self, counter: Counter) -> int:
        from langchain_core.messages import get_buffer_string

        return sum(counter(get_buffer_string([m])) for m in self.history.messages)

    def buffer_len(self) -> int:
        return len(self.history.messages)


def _llama_llm(summarizer: FakeSummarizer) -> Any:
    from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata
    from llama_index.core.llms.callbacks import llm_completion_callback
    from pydantic import PrivateAttr

    class FakeSummaryLLM(CustomLLM):
        """Offline LLM whose completion is the canned summary; the fake summarizer sees each prompt."""

        _summarizer: Any = PrivateAttr()

        def __init__(self, summarizer: FakeSummarizer) -> None:
            super().__init__()
            self._summarizer = summarizer

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name="rollmem-bench-fake")

        @llm_completion_callback()
        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            return CompletionResponse(text=self._summarizer.record(prompt))

        @llm_completion_callback()
        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            yield self.complete(prompt, formatted=formatted, **kwargs)

    return FakeSummaryLLM(summarizer)


class LlamaIndexPeer(Peer):
    def __init__(self, max_tokens: int, counter: Counter, summarizer: FakeSummarizer) -> None:
        from llama_index.core.memory import ChatSummaryMemoryBuffer

        def tokenize(text: str) -> range:  # only len() of the result is used
            return range(counter(text))

        self.memory = ChatSummaryMemoryBuffer.from_defaults(
            llm=_llama_llm(summarizer),
            token_limit=max_tokens,
            tokenizer_fn=tokenize,
            summarize_prompt="Summarize the conversation so far.",
        )

    def convert(self, messages: Sequence[Message]) -> list[Any]:
        from llama_index.core.llms import ChatMessage, MessageRole

        roles = {USER: MessageRole.USER, ASSISTANT: MessageRole.ASSISTANT, TOOL: MessageRole.TOOL}
        out: list[Any] = []
        for m in messages:
            extra: dict[str, Any] = {}
            if m.tool_calls:
                extra["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in m.tool_calls
                ]
            if m.tool_call_id is not None:
                extra["tool_call_id"] = m.tool_call_id
            role = roles.get(m.role, MessageRole.SYSTEM)
            out.append(ChatMessage(role=role, content=m.content, additional_kwargs=extra))
        return out

    def prefill(self, natives: Sequence[Any]) -> None:
        self.memory.set(list(natives))

    def add(self, native: Any) -> None:
        self.memory.put(native)
        self.memory.get()

    def _verbatim(self) -> list[Any]:
        # The workload has no system turns: a system message here is the summary it wrote.
        return [m for m in self.memory.get_all() if m.role.value != SYSTEM]

    def buffer_tokens(self, counter: Counter) -> int:
        return sum(counter(str(m.content)) for m in self._verbatim())

    def buffer_len(self) -> int:
        return len(self._verbatim())


PeerFactory = Callable[[int, Counter, FakeSummarizer], Peer]


def rollmem_default(max_tokens: int, counter: Counter, summarizer: FakeSummarizer) -> Peer:
    return RollmemPeer(max_tokens, counter, summarizer)


def rollmem_target_half(max_tokens: int, counter: Counter, summarizer: FakeSummarizer) -> Peer:
    return RollmemPeer(max_tokens, counter, summarizer, target_tokens=max(1, max_tokens // 2))


FACTORIES: dict[str, PeerFactory] = {
    "rollmem": rollmem_default,
    "rollmem_target50": rollmem_target_half,
    "langchain": LangChainPeer,
    "llamaindex": LlamaIndexPeer,
    "naive": NaivePeer,
}
LABELS = {
    "rollmem": "rollmem",
    "rollmem_target50": "rollmem target 50%",
    "langchain": "LangChain classic",
    "llamaindex": "LlamaIndex",
    "naive": "naive (recount all)",
}
