"""HTTP URLs the user gives rlmd (a model server's ``base_url``, an OTLP receiver): checked
where they are read, so a typo is an error naming the key, not a failure at the first
request after retries. Standard library only."""

from __future__ import annotations

from urllib.parse import urlsplit


def http_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be an ``http://`` or ``https://`` URL to send requests to (``"is
    not an http:// or https:// URL"``, ``"names no host"``, ...), or ``None`` when it can:
    a scheme of http or https, a host, a port (if any) from 1 to 65535, no blanks or
    control characters."""
    try:
        parts = urlsplit(url)
        if parts.scheme.lower() not in ("http", "https"):
            return "is not an http:// or https:// URL"
        if not parts.hostname:
            return "names no host"
        if parts.port == 0:
            return "names port 0"
    except ValueError as exc:  # a port out of range or not a number, an unclosed [ of IPv6
        return f"has a host or port that cannot be read ({exc})"
    if any(c.isspace() or not c.isprintable() for c in url):
        return "holds a blank or a control character"
    return None


def shown_url(url: str) -> str:
    """``url`` with the password of ``user:password@`` replaced by ``***`` (for messages)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.netloc.rpartition("@")[2]
        return parts._replace(netloc=f"{parts.username}:***@{host}").geturl()
    except ValueError:
        return url
