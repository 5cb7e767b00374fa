"""Bearer tokens for the HTTP transport: the tokens file and the SDK token verifier.

File format, one token per line: `read TOKEN` or `write TOKEN`; blank lines and lines starting
with `#` are ignored. Anything else is an error at startup (a typo must not silently lock a client
out or, worse, grant it the wrong scope).

The file must be private, as ssh requires of a private key: a tokens file that its group or
others may read or write, or that belongs to another user (root excepted), is refused at startup
with its mode in the message (`chmod 600 FILE` fixes it). Anyone who can read it can use the
tokens; anyone who can write it can add one.
"""
from __future__ import annotations

import hmac
import os
import stat
from dataclasses import dataclass

from mcp.server.auth.provider import AccessToken

READ_SCOPE = "read"
WRITE_SCOPE = "write"
_SCOPES = {READ_SCOPE: [READ_SCOPE], WRITE_SCOPE: [READ_SCOPE, WRITE_SCOPE]}


class TokensFileError(ValueError):
    """The tokens file cannot be used; the message names the line, never the token."""


@dataclass(frozen=True)
class Token:
    scope: str  # READ_SCOPE or WRITE_SCOPE
    token: str
    line: int


def parse_tokens(text: str) -> list[Token]:
    tokens: list[Token] = []
    seen: set[str] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) > 2 and parts[2].startswith("#"):
            parts = parts[:2]  # a trailing comment (tokens never contain spaces)
        if len(parts) != 2 or parts[0] not in _SCOPES:
            raise TokensFileError(f"line {number}: expected 'read TOKEN' or 'write TOKEN'")
        scope, token = parts
        # Header-safe: visible ASCII only, so the token survives an Authorization header intact.
        if not all("\x21" <= ch <= "\x7e" for ch in token):
            raise TokensFileError(f"line {number}: a token must be visible ASCII characters")
        if token in seen:
            raise TokensFileError(f"line {number}: token listed twice")
        seen.add(token)
        tokens.append(Token(scope, token, number))
    if not tokens:
        raise TokensFileError("no tokens in the file")
    return tokens


def check_private(path: str | os.PathLike[str], st: os.stat_result) -> None:
    """Refuse a tokens file that other users may read or write (TokensFileError)."""
    if os.name != "posix":
        return
    if not stat.S_ISREG(st.st_mode):
        raise TokensFileError(f"tokens file {path} is not a regular file")
    loose = stat.S_IMODE(st.st_mode) & 0o077
    if loose:
        raise TokensFileError(
            f"tokens file {path} is accessible by group or others (mode {stat.S_IMODE(st.st_mode):04o}): "
            f"anyone who can read it can use its tokens; run 'chmod 600 {path}'"
        )
    if st.st_uid not in (os.geteuid(), 0):
        raise TokensFileError(f"tokens file {path} belongs to another user (uid {st.st_uid}); it must be yours")


def load_tokens(path: str | os.PathLike[str]) -> list[Token]:
    try:
        with open(path, "rb") as f:
            # Checked on the open file, so a file swapped in after the check cannot be read.
            check_private(path, os.fstat(f.fileno()))
            text = f.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TokensFileError(f"cannot read tokens file: {exc}") from exc
    try:
        return parse_tokens(text)
    except TokensFileError as exc:
        raise TokensFileError(f"tokens file {path}: {exc}") from None


class StaticTokenVerifier:
    """`TokenVerifier` for the SDK's bearer middleware over a fixed list of tokens."""

    def __init__(self, tokens: list[Token]) -> None:
        self._tokens = [(t.token.encode(), t) for t in tokens]

    async def verify_token(self, token: str) -> AccessToken | None:
        presented = token.encode("utf-8", "surrogatepass")
        found: Token | None = None
        # Compare against every token with a constant-time comparison so timing says nothing.
        for candidate, entry in self._tokens:
            if hmac.compare_digest(candidate, presented):
                found = entry
        if found is None:
            return None
        # A distinct client_id per token: the SDK binds HTTP sessions to it, so one token cannot
        # continue a session opened with another.
        return AccessToken(token=token, client_id=f"{found.scope}-token-line-{found.line}", scopes=_SCOPES[found.scope])
