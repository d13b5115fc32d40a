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
