"""Okapi BM25 over chunks: the ranking retrieval uses for each question.

Terms are lower-cased words with a light suffix strip (plural, -ing/-ed/-tion, final e), so "valves"
matches "valve" and "inspected" matches "inspection"; stop words carry no evidence and are dropped.
A chunk's section heading is indexed with its text: questions often name the section.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

K1 = 1.5
B = 0.75

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOP_TEXT = """a an and are as at be been but by can could did do does for from had has have how i if in into is it
its of on or our she he so than that the their them then there these they this those to was we were what
when where which who whom whose why will with would you your about after before which also any all not
no yes more most other some such only own same too very just over under between during each few"""
STOP_WORDS = frozenset(_STOP_TEXT.split())


def _stem(word: str) -> str:
    """Plural, then -ing/-ed/-tion, then a final e: valves/valve -> valv, inspected/inspection -> inspect."""
    w = word
    if len(w) > 4:
        if w.endswith("ies"):
            w = w[:-3] + "y"
        elif w.endswith(("sses", "ses", "xes", "zes", "ches", "shes")):
            w = w[:-2]
        elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
            w = w[:-1]
    for suffix, keep in (("ing", ""), ("ed", ""), ("tion", "t")):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[: -len(suffix)] + keep
            break
    if w.endswith("e") and len(w) > 4:
        w = w[:-1]
    return w


def terms(text: str) -> list[str]:
    return [_stem(w) for w in (m.group(0).lower() for m in _WORD.finditer(text)) if w not in STOP_WORDS]


class BM25:
    def __init__(self, documents: Sequence[str], *, k1: float = K1, b: float = B) -> None:
        self.k1 = k1
        self.b = b
        self._tfs = [Counter(terms(d)) for d in documents]
        self._lengths = [sum(tf.values()) for tf in self._tfs]
        self.n = len(documents)
        self.avg_len = (sum(self._lengths) / self.n) if self.n else 0.0
        df: Counter[str] = Counter()
        for tf in self._tfs:
            df.update(tf.keys())
        # The +1 inside the log keeps idf positive for terms in more than half the chunks.
        self._idf = {t: math.log(1 + (self.n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def scores(self, query: str) -> list[float]:
        q = set(terms(query))
        out = []
        for tf, length in zip(self._tfs, self._lengths, strict=True):
            s = 0.0
            norm = self.k1 * (1 - self.b + self.b * length / self.avg_len) if self.avg_len else self.k1
            for t in q:
                f = tf.get(t)
                if f:
                    s += self._idf[t] * f * (self.k1 + 1) / (f + norm)
            out.append(s)
        return out

    def rank(self, query: str, k: int | None = None) -> list[tuple[int, float]]:
        """(index, score) best first; chunks with no matching term are left out."""
        ranked = sorted(((i, s) for i, s in enumerate(self.scores(query)) if s > 0), key=lambda x: (-x[1], x[0]))
        return ranked if k is None else ranked[:k]
