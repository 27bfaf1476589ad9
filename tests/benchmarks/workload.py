"""A deterministic synthetic conversation: the one workload every benchmarked memory is fed.

``conversation(n, seed)`` returns ``n`` :class:`rollmem.Message` values. The same ``(n, seed)`` gives
the same messages on every machine and Python version (only :class:`random.Random` with an int seed
is used). Turns are English-like sentences of 5 to 120 words; about one assistant turn in six calls
one or two tools, followed by one tool result per call and the assistant's answer.
"""

from __future__ import annotations

import json
import random

from rollmem import ASSISTANT, TOOL, USER, Message, ToolCall

MIN_WORDS = 5
MAX_WORDS = 120

_COMMON = (  # noqa: SIM905 - a word list reads better as text
    "the of and to a in is it you that he was for on are with as I his they be at one have this from "
    "or had by not word but what some we can out other were all there when up use your how said an "
    "each she which do their time if will way about many then them write would like so these her "
    "long make thing see him two has look more day could go come did number sound no most people my "
    "over know water than call first who may down side been now find any new work part take get "
    "place made live where after back little only round man year came show every good me give our "
    "under name very through just form sentence great think say help low line differ turn cause much "
    "mean before move right boy old too same tell does set three want air well also play small end "
    "put home read hand port large spell add even land here must big high such follow act why ask "
    "men change went light kind off need house picture try us again animal point mother world near "
    "build self earth father"
).split()
_TOPIC = (  # noqa: SIM905 - a word list reads better as text
    "invoice order refund shipment account password server database query latency budget report "
    "meeting schedule flight hotel booking weather forecast recipe garden project deadline release "
    "ticket customer payment subscription backup cluster deployment migration index cache token "
    "summary contract warranty delivery address appointment prescription mortgage portfolio"
).split()
_PUNCT = (".", ".", ".", "?", "!", ",")
_TOOLS = (
    ("search_orders", ("customer", "status", "since")),
    ("get_weather", ("city", "date")),
    ("lookup_account", ("account_id",)),
    ("run_query", ("sql", "limit")),
    ("book_meeting", ("attendees", "start", "duration")),
)


def _words(rng: random.Random, count: int) -> str:
    """``count`` English-like words in sentences: a common word mostly, a topic word or number sometimes."""
    out: list[str] = []
    sentence_left = rng.randint(6, 18)
    capital = True
    for i in range(count):
        roll = rng.random()
        if roll < 0.8:
            word = _COMMON[int(len(_COMMON) * rng.random() ** 2.5)]
        elif roll < 0.97:
            word = rng.choice(_TOPIC)
        else:
            word = str(rng.randint(2, 99999))
        if capital:
            word = word[:1].upper() + word[1:]
            capital = False
        sentence_left -= 1
        if sentence_left == 0 or i == count - 1:
            word += rng.choice(_PUNCT) if i < count - 1 else "."
            capital = not word.endswith(",")
            sentence_left = rng.randint(6, 18)
        out.append(word)
    return " ".join(out)


def _length(rng: random.Random, low: int, high: int) -> int:
    """A skewed length in ``[low, high]``: most turns are short, a few are long."""
    return low + int((high - low) * rng.random() ** 1.6)


def conversation(n: int, seed: int = 20240501) -> list[Message]:
    """The first ``n`` messages of the synthetic conversation for ``seed``."""
    rng = random.Random(seed)
    messages: list[Message] = []
    call_no = 0
    while len(messages) < n:
        messages.append(Message(USER, _words(rng, _length(rng, MIN_WORDS, 60))))
        if rng.random() < 1 / 6:
            calls = []
            for _ in range(rng.choice((1, 1, 1, 2))):
                call_no += 1
                name, params = rng.choice(_TOOLS)
                args = {p: _words(rng, rng.randint(1, 3)).rstrip(".?!,") for p in params}
                calls.append(ToolCall(f"call_{call_no}", name, json.dumps(args)))
            messages.append(Message(ASSISTANT, _words(rng, rng.randint(MIN_WORDS, 15)), tool_calls=calls))
            for call in calls:
                result = _words(rng, _length(rng, MIN_WORDS, MAX_WORDS))
                messages.append(Message(TOOL, result, tool_call_id=call.id))
        messages.append(Message(ASSISTANT, _words(rng, _length(rng, 20, MAX_WORDS))))
    return messages[:n]
