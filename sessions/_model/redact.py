"""``redact(text, secrets=...)``: the one function that keeps passwords out of text.

Every error message, log line, ``repr`` and line of CLI output that may hold a database
URL goes through :func:`redact`. It masks, with ``***``:

* the password of every URL in ``text`` (``scheme://user:PASSWORD@host...``), even
  when the password holds unescaped ``@ : / ? # %`` (then the mask runs to the last
  ``@`` that is followed by a plausible host: more is hidden rather than less);
* the value of ``password=`` / ``sslpassword=`` / ``passwd=`` / ``pwd=`` / ``pass=``
  parameters (in a query string or in ``key=value`` text);
* every password found in ``secrets`` (URLs the caller knows about, such as the DSN
  it connected with) wherever it appears in ``text``: as written, percent-decoded and
  percent-encoded (bare passwords shorter than 3 characters are masked only inside
  URLs: masking every ``a`` of a message would make it unreadable).

It never raises: a malformed URL is redacted as well as it can be.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import quote, unquote

__all__ = ["MASK", "redact"]

MASK = "***"

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
# What may follow the '@' that ends a userinfo: hosts (a list, with ports, IPv6 in
# brackets), then the path, query, fragment or the end.
_HOSTS = re.compile(r"[A-Za-z0-9._~%\-\[\]:,]*(?=[/?#\s'\"<>]|$)")
_QUERY_SECRET = re.compile(
    r"(?i)((?:^|(?<=[?&;\s]))(?:password|sslpassword|passwd|pwd|pass)=)"
    r"(?!\*\*\*(?:[:,;)&\s'\"]|$))([^&\s'\"]*)"
)
# In a URL the caller knows, a password parameter runs to the next '&' (or '#').
_QUERY_VALUE = re.compile(r"(?i)[?&;](?:password|sslpassword|passwd|pwd|pass)=([^&]*)")
_URL_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]*")
_MIN_BARE = 3


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with every password masked (see the module docstring).

    ``text`` may be a URL or any message; ``secrets`` are URLs (or DSNs) whose
    passwords must not appear anywhere in ``text``.
    """
    if not isinstance(text, str):
        return f"<{type(text).__name__}>"
    known = [s for s in secrets if isinstance(s, str) and s]
    for url in known:
        if url in text:
            text = text.replace(url, _redact_url(url))
    text = _URL_TOKEN.sub(lambda m: _redact_url(m.group()), text)
    text = _QUERY_SECRET.sub(lambda m: m.group(1) + (MASK if m.group(2) else ""), text)
    bare: set[str] = set()
    for url in known:
        bare.update(_passwords(url))
    for secret in sorted(bare, key=len, reverse=True):
        if len(secret) >= _MIN_BARE and secret != MASK:
            text = text.replace(secret, MASK)
    return text


def _redact_url(url: str) -> str:
    """One URL (``url`` starts with ``scheme://``) with its password masked."""
    match = _SCHEME.match(url)
    if match is None:
        return url
    head, rest = url[: match.end()], url[match.end() :]
    colon, at = _userinfo(rest)
    if colon is not None and at is not None:
        rest = f"{rest[:colon]}:{MASK}{rest[at:]}"
    return head + rest


def _userinfo(rest: str) -> tuple[int | None, int | None]:
    """``(colon, at)``: where the password of ``rest`` (a URL after ``scheme://``)
    starts (after ``colon``) and ends (at ``at``); ``(None, None)`` if it has none."""
    first = re.search(r"[:@/?#]", rest)
    if first is None or rest[first.start()] != ":":
        return None, None  # no userinfo, or a user without a password
    colon = first.start()
    ends = _ends(rest, colon)
    return (colon, ends[-1]) if ends else (None, None)


def _ends(rest: str, colon: int) -> list[int]:
    """Every ``@`` after ``colon`` that could end the userinfo, in order."""
    return [
        i
        for i in range(colon + 1, len(rest))
        if rest[i] == "@" and _HOSTS.match(rest, i + 1) is not None
    ]


def _passwords(url: str) -> set[str]:
    """Every string that may be the password in ``url``, in each spelling."""
    found: set[str] = set()
    match = _SCHEME.match(url)
    if match is not None:
        rest = url[match.end() :]
        colon, _ = _userinfo(rest)
        if colon is not None:
            found.update(rest[colon + 1 : at] for at in _ends(rest, colon))
    for value in _QUERY_VALUE.findall(url):
        found.update((value, value.split("#", 1)[0]))
    spelled: set[str] = set()
    for secret in found:
        plain = unquote(secret)
        spelled.update((secret, plain, quote(plain, safe=""), quote(plain, safe="@:")))
    return {s for s in spelled if s}
