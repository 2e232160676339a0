"""What the page's API accepts as text and positions (shared by its routers)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator

#: The largest position a queue can hold (a signed 64-bit identity).
MAX_SEQ = 2**63 - 1


def no_nul(text: str) -> str:
    """A text without NUL characters (no database text column can hold one); ValueError names the fix."""
    if "\x00" in text:
        raise ValueError("must not contain a NUL character (U+0000): remove it")
    return text


#: Text sent by the browser: never a NUL character.
Text = Annotated[str, AfterValidator(no_nul)]

#: A field failed messages are filtered and grouped by.
Field_ = Literal["failed_q", "exception_type", "message_type"]
