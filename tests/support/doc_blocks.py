"""The fenced code blocks of a Markdown document, for the tests that run what the docs print.

A block opens with a line of three backticks and a language (```shell, ```python, ```text ...; the line may
be indented, as in a list item) and closes with a line of three backticks alone. Its code is dedented. A fence
inside an HTML comment opens no block.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import textwrap

_FENCE = re.compile(r"^[ \t]*```([\w-]*)[ \t]*$")


@dataclasses.dataclass(frozen=True)
class Block:
    path: pathlib.Path
    language: str
    line: int  # 1-based line of the block's first line of code in the document
    code: str

    @property
    def title(self) -> str:
        first = self.code.lstrip().splitlines()[0] if self.code.strip() else ""
        return first.removeprefix("# Example:").strip() if first.startswith("# Example:") else f"line {self.line}"

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"

    def head(self, lines: int = 6) -> str:
        return "\n".join(self.code.splitlines()[:lines])


def fenced_blocks(path: pathlib.Path, section: str | None = None) -> list[Block]:
    """Every fenced block of the document at ``path`` (of its ``## section`` only, if given), in order.

    Raises AssertionError: a block is never closed."""
    text = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), path.read_text(), flags=re.DOTALL)
    lines_of_text = text.splitlines()
    first, last = 0, len(lines_of_text)
    if section is not None:
        first = lines_of_text.index(f"## {section}")
        last = next((number for number in range(first + 1, last) if lines_of_text[number].startswith("## ")), last)
    blocks, language, start, lines = [], None, 0, []
    for number in range(first, last):
        line = lines_of_text[number]
        fence = _FENCE.match(line)
        if language is None:
            if fence:
                language, start, lines = fence.group(1), number + 2, []
        elif line.strip() == "```":
            blocks.append(Block(path, language, start, textwrap.dedent("\n".join(lines)) + "\n"))
            language = None
        else:
            lines.append(line)
    assert language is None, f"{path}: a block opened at line {start - 1} is never closed"
    return blocks
