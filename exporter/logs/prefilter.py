"""A cheap, exact gate in front of a many-alternative regex: the literals its alternatives cannot match without.

The analyzer asks of every line whose message is not on a fast path whether it holds any word of the
vocabulary (patterns.ANY_HINT, ~60 alternatives). Python's regex engine tries every alternative at every
character: ~45 ns a character on a quiet machine, 200 on a loaded one, so a 2,000-byte line cost 0.1-0.4 ms,
most of the scan time on long-line logs. Every alternative contains a literal it cannot match without;
`str.__contains__` finds a literal at memchr speed. The gate runs the regex only when one of those literals
is in the text, so its answer is the regex's answer, always: a text without any of them cannot match.

The literals are read from the regex itself (its parse tree), so a word added to the vocabulary in
patterns.py is covered without touching this file.
"""

from __future__ import annotations

import re
import sys
from typing import Any

try:
    import re._parser as sre_parse  # type: ignore[import-not-found,unused-ignore]  # the stdlib's regex parser
except ImportError:  # Python 3.10
    import sre_parse  # type: ignore[no-redef,unused-ignore]

MIN_LITERAL = 3  # shorter literals are everywhere: then the gate would only add work
GATE_FROM_CHARS = 160  # below this the regex alone is as fast as one `in` per literal


def required_literals(pattern: re.Pattern[str]) -> tuple[str, ...] | None:
    """One literal per top-level alternative that every match of it contains, without those implied by a
    shorter one; None when some alternative has no literal of MIN_LITERAL characters (no gate then)."""
    if pattern.flags & re.IGNORECASE:
        return None
    tree = sre_parse.parse(pattern.pattern, pattern.flags)
    items = tree.data
    alternatives = items[0][1][1] if len(items) == 1 and items[0][0] is sre_parse.BRANCH else [tree]
    found = set()
    for alt in alternatives:
        best = run = ""
        for op, arg in alt.data:  # top-level items of one alternative are all required, in order
            if op is sre_parse.LITERAL:
                run += chr(arg)
                if len(run) > len(best):
                    best = run
            else:
                run = ""
        if len(best) < MIN_LITERAL:
            return None
        found.add(best)
    return tuple(sorted(a for a in found if not any(b != a and b in a for b in found)))


class LiteralGate:
    """Stands in for a compiled pattern where only `search` is hot; anything else goes to the pattern."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.regex = pattern
        self.literals = required_literals(pattern)

    def search(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        if self.literals is not None and min(len(string), endpos) - pos >= GATE_FROM_CHARS:
            text = string if pos == 0 and endpos >= len(string) else string[pos:endpos]
            if not any(map(text.__contains__, self.literals)):
                return None
        return self.regex.search(string, pos, endpos)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.regex, name)


MAX_SPELLINGS = 64  # a stretch of small alternations (`(?:CUDA|HIP) out`) is spelled out up to this many ways


def _stretches(items: list[tuple[Any, Any]]) -> list[set[str]] | None:
    """The sets of spellings of each run of plain text in a sequence (literals, and groups of pure-literal
    alternatives, multiplied out); zero-width assertions do not break a run, anything else does."""
    out: list[set[str]] = []
    run: set[str] = {""}
    for op, arg in items:
        spellings: set[str] | None = None
        if op is sre_parse.LITERAL:
            spellings = {chr(arg)}
        elif op is sre_parse.AT:
            continue
        elif op is sre_parse.IN and all(o is sre_parse.LITERAL for o, _ in arg):
            spellings = {chr(c) for _, c in arg}
        elif op is sre_parse.SUBPATTERN or op is sre_parse.BRANCH:
            spellings = _spellings(arg[-1] if op is sre_parse.SUBPATTERN else arg)
        if spellings is not None and len(run) * len(spellings) <= MAX_SPELLINGS:
            run = {a + b for a in run for b in spellings}
            continue
        if run != {""}:
            out.append(run)
        run = {""}
        if spellings is not None:  # too many ways together with the run before it: a run of its own
            run = spellings
        elif op is sre_parse.SUBPATTERN or op is sre_parse.BRANCH:  # not spellable: maybe each branch needs a word
            inner = _needed(arg[-1] if op is sre_parse.SUBPATTERN else arg)
            if inner is not None:
                out.append(set(inner))
    if run != {""}:
        out.append(run)
    return out


def _spellings(node: Any) -> set[str] | None:
    """Every string a pure-literal subpattern or branch can match, or None."""
    if isinstance(node, tuple):  # BRANCH's argument: (None, [alternatives])
        result: set[str] = set()
        for alt in node[1]:
            s = _spellings(alt)
            if s is None:
                return None
            result |= s
        return result if len(result) <= MAX_SPELLINGS else None
    run: set[str] = {""}
    for op, arg in node.data if hasattr(node, "data") else node:
        if op is sre_parse.LITERAL:
            run = {a + chr(arg) for a in run}
        elif op is sre_parse.AT:
            continue
        elif op is sre_parse.IN and all(o is sre_parse.LITERAL for o, _ in arg):  # `ba(?:r|z)` parses as `ba[rz]`
            run = {a + chr(c) for a in run for _, c in arg}
            if len(run) > MAX_SPELLINGS:
                return None
        elif op is sre_parse.SUBPATTERN or op is sre_parse.BRANCH:
            s = _spellings(arg[-1] if op is sre_parse.SUBPATTERN else arg)
            if s is None or len(run) * len(s) > MAX_SPELLINGS:
                return None
            run = {a + b for a in run for b in s}
        else:
            return None
    return run


def _needed(node: Any) -> set[str] | None:
    """Literals one of which every match of `node` (a parsed pattern or a BRANCH argument) contains."""
    if isinstance(node, tuple):
        result: set[str] = set()
        for alt in node[1]:
            s = _needed(alt)
            if s is None:
                return None
            result |= s
        return result
    items = list(node.data if hasattr(node, "data") else node)
    if len(items) == 1 and items[0][0] is sre_parse.BRANCH:
        return _needed(items[0][1])
    stretches = _stretches(items)
    if not stretches:
        return None
    best = max(stretches, key=lambda s: (min(map(len, s)), -len(s)))
    return best if min(map(len, best)) >= 1 else None


def needed_literals(pattern: re.Pattern[str]) -> tuple[str, ...] | None:
    """Literals one of which every match of `pattern` contains (runs of plain text, small alternations spelled
    out, a top-level alternation taken branch by branch); None when some match could contain none of them."""
    if pattern.flags & re.IGNORECASE:
        return None
    found = _needed(sre_parse.parse(pattern.pattern, pattern.flags))
    if found is None:
        return None
    return tuple(sorted(a for a in found if not any(b != a and b in a for b in found)))


def alternatives(pattern: re.Pattern[str]) -> tuple[str, ...] | None:
    """Every string the pattern matches, when it is a plain alternation of literals; else None."""
    if pattern.flags & re.IGNORECASE:
        return None
    found = _spellings(sre_parse.parse(pattern.pattern, pattern.flags))
    return None if found is None else tuple(sorted(found))
