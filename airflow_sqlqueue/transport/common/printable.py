"""Text from rows, as a terminal or a log may show it: control characters written as visible escapes.

Bodies, headers and queue names come from other programs. Printed raw, an ESC starts a terminal control
sequence (colours, a new window title, hyperlinks, on some terminals reading the screen back), BEL rings, a C1
control does the same as ESC on 8-bit terminals, and bidirectional overrides make text read in another order
than it is stored (the "Trojan Source" trick). ``printable`` writes each such character as a Python-style escape
(``\\x1b``, ``\\u202e``) so that what is shown is what is stored, and nothing is executed by the terminal.
"""

from __future__ import annotations

import re

#: C0 and C1 controls and DEL; format characters that reorder or hide text (bidi marks, embeddings, overrides and
#: isolates, zero-width characters, invisible operators, the byte-order mark, interlinear annotations, tags);
#: line and paragraph separators; lone surrogates (which a terminal cannot encode).
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff"
                    "\ufff9-\ufffb\ud800-\udfff\U000e0000-\U000e007f]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: object) -> str:
    """``text`` (or ``str(text)``) with every control, bidi and invisible character written as an escape."""
    value = text if isinstance(text, str) else str(text)
    return UNSAFE.sub(_escape, value)


def printable_lines(text: str) -> str:
    """Several lines (a traceback, a log record): each line made ``printable``, the line breaks kept."""
    return "\n".join(printable(line) for line in text.split("\n"))


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def printable_json(json_text: str) -> str:
    """JSON text (as ``json.dumps(..., ensure_ascii=False)`` writes it) with the same characters ``printable``
    escapes written as JSON escapes: the same value for a parser, nothing a terminal acts on (lone surrogates
    included, which could not be written as UTF-8 at all)."""
    return UNSAFE.sub(_json_escape, json_text)
