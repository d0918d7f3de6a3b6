"""How alike two playbook items are, so an ADD of a lesson the playbook already holds
merges into it instead of growing the playbook with a twin (ACE's de-duplication step).

Lexical only, on purpose: it runs inside `PlaybookWorkflow`, so it must be deterministic
and cheap, with no model and no I/O. It catches the same lesson written with other case,
punctuation, markdown or whitespace, with its words reordered, or with a small edit (a
typo, a word added or dropped). It misses paraphrases that use different words ("run the
tests before committing" / "never commit untested code"): catching those needs embeddings.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher

from loopworks.schemas.playbook import ItemKind, PlaybookItem

# Words that carry no lesson on their own. Kept tiny, and without negations ("not", "no",
# "never"), which flip a rule's meaning.
STOPWORDS = frozenset(
    {"a", "an", "the", "and", "or", "of", "to", "in", "on", "at", "by", "for", "with"}
    | {"is", "are", "be", "it", "its", "this", "that", "these", "those"}
)
# Markdown and punctuation are both non-word characters; the underscore is a word
# character to `\w` but emphasis to markdown, so it goes too.
_NON_WORD = re.compile(r"[\W_]+")


def words(text: str) -> list[str]:
    """The lowercase words of `text`, markdown, punctuation and trivial stopwords dropped."""
    return [word for word in _NON_WORD.split(text.lower()) if word and word not in STOPWORDS]


def normalise(text: str) -> str:
    """`text` as compared: its `words` joined by single spaces, so that case, punctuation,
    markdown (`**bold**`, `` `code` ``, `# heading`, `[link](url)`) and spacing never make
    two items look different."""
    return " ".join(words(text))


def similarity(a: str, b: str) -> float:
    """How alike `a` and `b` are, in [0, 1], on their normalised text.

    The larger of two measures, since each catches what the other misses: difflib's
    character ratio sees a small edit in a long sentence as small (a typo changes one
    token, which Jaccard would count as a whole word lost and gained), and token-set
    Jaccard sees reordered words ("lint before commit" / "before commit lint") as the
    same set, where the character ratio drops. Both stay near 0 for unrelated texts.
    """
    left, right = normalise(a), normalise(b)
    if left == right:
        return 1.0
    if not left or not right:
        return 0.0
    # autojunk off: it only kicks in past 200 characters and then ignores frequent
    # characters such as spaces, which would understate the ratio of long items.
    ratio = SequenceMatcher(None, left, right, autojunk=False).ratio()
    left_set, right_set = set(left.split()), set(right.split())
    jaccard = len(left_set & right_set) / len(left_set | right_set)
    return max(ratio, jaccard)


def most_similar(
    content: str, items: list[PlaybookItem], kind: ItemKind
) -> tuple[PlaybookItem, float] | None:
    """The item of `kind` most like `content`, with its similarity; the earliest on a tie,
    so the answer never depends on anything but the items' order. None: no item of
    that kind. Kinds never mix: a constraint and a skill saying the same words are two
    different lessons (a rule to follow, a way to do it)."""
    best: tuple[PlaybookItem, float] | None = None
    for item in items:
        if item.kind != kind:
            continue
        score = similarity(content, item.content)
        if best is None or score > best[1]:
            best = (item, score)
    return best
