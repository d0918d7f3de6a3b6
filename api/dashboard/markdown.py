"""Markdown a model or a repository wrote, as HTML that cannot carry markup of its own.

markdown-it-py with raw HTML off escapes every tag in the text (a `<script>` is shown as
text) and refuses `javascript:`, `vbscript:`, `file:` and non-image `data:` links; the
pages' Content-Security-Policy would stop a script and a remote image besides.
"""

from __future__ import annotations

from markdown_it import MarkdownIt
from markupsafe import Markup

_MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable("table")
# Past this the page shows the start; the whole text is one link away (the JSON route).
CAP_CHARS = 200_000


def rendered(text: str) -> Markup:
    """`text` as HTML: the only markup in it is what markdown makes."""
    html = _MARKDOWN.render(text[:CAP_CHARS])
    # markdown-it escaped every tag the text held: what is left is its own markup.
    return Markup(html)
