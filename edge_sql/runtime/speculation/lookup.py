"""Prompt-lookup drafts: continue the longest recent n-gram of the context that occurred before.

An agent transcript repeats itself: `submit_sql` repeats a `run_query` that just ran, table
and column names are copied from tool results, the forced final answer returns the quoted
last query. When the context ends with an n-gram that occurred earlier, the tokens that
followed its latest earlier occurrence are a free guess at what comes next.

The index is incremental (a dict per n-gram length from n-gram to the position after its
latest occurrence), so a draft costs a few dict look-ups, not a scan of the context.
"""

from __future__ import annotations

from collections.abc import Sequence

_GUARD = 8  # tokens compared to detect a context that is not an extension of the indexed one


class LookupDrafter:
    """Drafts from the context itself; `min_n`..`max_n` are the n-gram lengths matched.

    Longer matches are tried first (they predict better); among equal lengths the latest
    occurrence wins (recent text is what the model is copying).
    """

    name = "lookup"

    def __init__(self, *, min_n: int = 2, max_n: int = 6) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError("need 1 <= min_n <= max_n")
        self.min_n, self.max_n = min_n, max_n
        self.reset()

    def reset(self) -> None:
        """Forget the indexed context (a new episode)."""
        self._seen: list[int] = []
        self._index: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in range(self.min_n, self.max_n + 1)}

    def _sync(self, context: Sequence[int]) -> None:
        """Index the n-grams that gained a following token since the last call."""
        seen = len(self._seen)
        if seen > len(context) or list(context[max(0, seen - _GUARD) : seen]) != self._seen[-_GUARD:]:
            self.reset()
            seen = 0
        tokens = self._seen
        tokens.extend(context[seen:])
        for end in range(max(seen, 1), len(tokens)):  # n-grams ending at `end` are followed by tokens[end]
            for n, index in self._index.items():
                if end >= n:
                    index[tuple(tokens[end - n : end])] = end

    def draft(self, context: Sequence[int], k: int) -> list[int]:
        """Up to `k` tokens that followed the latest earlier occurrence of the context's
        longest matching suffix; [] when no suffix of `min_n` or more tokens occurred before."""
        if k <= 0:
            return []
        self._sync(context)
        tokens = self._seen
        for n in range(min(self.max_n, len(tokens)), self.min_n - 1, -1):
            start = self._index[n].get(tuple(tokens[-n:]))
            if start is not None:
                return tokens[start : start + k]
        return []

    def observe(self, accepted: int, proposed: int) -> None:
        """Nothing to learn: how many tokens to ask for is the `Speculator`'s decision."""
