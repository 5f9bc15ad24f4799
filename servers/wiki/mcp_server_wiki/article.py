"""The page type shared by every corpus source: an `Article` is a title and an ordered list of (heading, text)
sections; `LEAD` is the heading of the text before the first heading.

It lives in its own module so that the corpus readers (`corpus.py`) and the synthetic world (`world.py`) both depend
on it and the import arrow between them runs one way: `corpus` -> `world` -> `article`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

LEAD = "Introduction"


@dataclass
class Article:
    """One page: its title and its sections in reading order."""

    title: str
    sections: list[tuple[str, str]] = field(default_factory=list)

    def text(self) -> str:
        """The page as Markdown: one `## heading` line before each section's text."""
        return "\n\n".join(f"## {h}\n{t}" for h, t in self.sections)
