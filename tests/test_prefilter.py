"""The literal gate in front of the hint regex answers exactly as the regex does."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from exporter.logs import patterns as P
from exporter.logs.prefilter import GATE_FROM_CHARS, LiteralGate, required_literals

WORDS = [
    "out of memory",
    "OutOfMemoryError",
    "KV cache",
    "Engine",
    "took",
    "takes",
    "version",
    "preempted",
    "SchedulerOutput(",
    "torch.compile",
    "apturing",
    "nccl",
    "GPU 0: ",
    "plain",
    "words",
    "0.3 s",
    "ta",
    "ok",
]


def test_every_alternative_of_the_hint_regex_has_a_literal():
    literals = required_literals(P.ANY_HINT.regex)
    assert literals is not None and "KV cache" in literals and "OutOfMemory" in literals
    assert "OutOfMemoryError" not in literals  # implied by OutOfMemory


def test_required_literals():
    assert required_literals(re.compile(r"out of memory|OutOfMemory(?:Error)?|nccl\w+")) == (
        "OutOfMemory",
        "nccl",
        "out of memory",
    )
    assert required_literals(re.compile(r"ab|xyz")) is None  # too short to be worth looking for
    assert required_literals(re.compile(r"(?i)memory")) is None


@given(st.lists(st.sampled_from(WORDS), max_size=60), st.integers(0, 40))
def test_the_gate_answers_as_the_regex(words, pos):
    text = " ".join(words) + " x" * GATE_FROM_CHARS
    gate, regex = P.ANY_HINT, P.ANY_HINT.regex
    assert isinstance(gate, LiteralGate)
    for args in ((text,), (text, pos), (text, pos, len(text) - pos)):
        a, b = gate.search(*args), regex.search(*args)
        assert (a and a.span()) == (b and b.span())
