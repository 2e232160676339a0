"""Keeping secrets out of logs, errors and event payloads: the one place passwords are blanked.

Every error or log line that may quote a connection URL, a driver's message or a connection's password goes
through one of these functions first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote

MASK = "***"

_QUERY_PASSWORD = re.compile(r"(?i)([?&;](?:password|pwd)=)[^&;#]*")
#: A URL starts with its scheme; a '://' further on may be inside a pasted password.
SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_TEXT_USER_PASSWORD = re.compile(r"(://[^/?#@\s:]*:)[^\s'\"]*@")  # scheme://user:PASSWORD@host (to the last @)
_TEXT_QUERY_PASSWORD = re.compile(r"(?i)\b((?:password|pwd)=)[^&;\s'\"]*?(?=:\s|[&;\s'\"]|$)")  # ?password=, PWD=


def password_span(url: str) -> tuple[int, int] | None:
    """Where the password of a URL is, read leniently: the user info ends at the last ``@``, so a password with
    an unencoded ``/``, ``?``, ``#`` or ``@`` (or in a URL with a typo in ``://``) is still found whole."""
    scheme = SCHEME.match(url)
    start = scheme.end() if scheme else 0  # not a URL (a typo): any ':' before the '@' may start it
    at = url.rfind("@")
    colon = url.find(":", start, at) if at > start else -1
    if colon < 0 or "@" in url[start:colon]:  # no user info, or a user without a password
        return None
    return colon + 1, at


def redact_url(url: str) -> str:
    """The URL with its password (user part, or a ``password=``/``pwd=`` parameter) replaced by ``***``."""
    span = password_span(url)
    return _QUERY_PASSWORD.sub(r"\1" + MASK, url if span is None else url[:span[0]] + MASK + url[span[1]:])


def blank(text: str, *secrets: str | None) -> str:
    """``text`` with each secret blanked, as written, percent-decoded and as Python's ``repr`` escapes it."""
    for secret in secrets:
        if not secret:
            continue
        for plain in (secret, unquote(secret)):
            for form in sorted({plain, repr(plain)[1:-1]}, key=len, reverse=True):
                if form:
                    text = text.replace(form, MASK)
    return text


def url_passwords(argument: str) -> list[str]:
    """The passwords in a command-line argument that holds a connection URL (``--url=...``, or a URL given where
    another argument was expected): the user part's and each ``password=``/``pwd=`` parameter's, as written.

    Unlike :func:`scrub`, which reads free text and so stops a password at a space or a quote, this knows the
    whole argument is the URL, so a password holding ``"``, ``'`` or a space is found whole.
    """
    scheme = SCHEME.search(argument)
    if scheme is None:
        return []
    url = argument[scheme.start():]
    span = password_span(url)
    found = [url[span[0]:span[1]]] if span else []
    found += [m.group(0).split("=", 1)[1] for m in _QUERY_PASSWORD.finditer(url)]
    return [secret for secret in found if secret]


def redact_arguments(text: str, arguments: Iterable[str]) -> str:
    """``text`` (a usage error, say) with the password of every URL among ``arguments`` blanked, then scrubbed.

    Each URL argument quoted whole (as written or as ``repr`` shows it) becomes its redacted form, so the message
    still says which argument was wrong.
    """
    secrets = []
    for argument in arguments:
        found = url_passwords(argument)
        if found:
            start = SCHEME.search(argument).start()  # type: ignore[union-attr]  (a password was found in a URL)
            redacted = argument[:start] + redact_url(argument[start:])
            for form in (argument, repr(argument)[1:-1]):
                text = text.replace(form, redacted)
            secrets += found
    return scrub(blank(text, *secrets))


def blank_url_password(text: str, url: str) -> str:
    """``text`` (a driver's error, say) with the password of ``url`` blanked wherever it appears."""
    span = password_span(url)
    return text if span is None else blank(text, url[span[0]:span[1]])


def scrub(text: str) -> str:
    """Free text with any password in a URL it quotes (user part or ``password=`` parameter) replaced."""
    return _TEXT_QUERY_PASSWORD.sub(r"\1" + MASK, _TEXT_USER_PASSWORD.sub(r"\1" + MASK + "@", text))


def first_line(exc: BaseException) -> str:
    """The first line of an error's text (its type name when it has none), URL passwords removed."""
    lines = str(exc).strip().splitlines()
    return scrub(lines[0]) if lines else type(exc).__name__


def describe(exc: BaseException, *secrets: str | None) -> str:
    """One line for an error: its type and first line of text, secrets and URL passwords removed."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return scrub(blank(text, *secrets))
