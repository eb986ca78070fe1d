"""Rule-based entity detection for multi-hop expansion (no NER, no LLM).

Capitalised tokens matching `[A-ZÀ-Ý][a-zà-ÿ]{2,}`, ranked by frequency over the kept facts,
minus sentence-starter words and the words of the query (spec: "Multi-hop expansion").
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from importlib.resources import files

ENTITY_PATTERN = re.compile(r"[A-ZÀ-Ý][a-zà-ÿ]{2,}")
_WORD = re.compile(r"\w+")

# Words that are capitalised because they start a sentence (or are function words), not because
# they name something; English and French, kept as data beside this module.
SENTENCE_STARTERS: frozenset[str] = frozenset(
    word.casefold()
    for line in (files(__package__) / "sentence_starters.txt").read_text(encoding="utf-8").splitlines()
    if (word := line.split("#", 1)[0].strip())
)


def extract_entities(texts: Iterable[str], query: str, limit: int) -> list[str]:
    """The `limit` most frequent entities of `texts`; ties keep first-seen order."""
    query_words = {w.casefold() for w in _WORD.findall(query)}
    counts: Counter[str] = Counter()
    for text in texts:
        for token in ENTITY_PATTERN.findall(text):
            folded = token.casefold()
            if folded in SENTENCE_STARTERS or folded in query_words:
                continue
            counts[token] += 1
    return [entity for entity, _ in counts.most_common(limit)]
