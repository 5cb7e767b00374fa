"""Files and words around the HTTP transport: a tokens file others may read is refused, and a
loopback bind without tokens says that loopback is not a user boundary."""
from __future__ import annotations

from pathlib import Path

import pytest
from e2e_helpers import HttpServer, run_cli


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o620, 0o604])
def test_a_tokens_file_others_may_access_is_refused(tmp_path: Path, mode: int) -> None:
    """Issue 15: a tokens file readable by group or others was accepted silently. Refused, as ssh
    refuses such a private key, with the mode and the fix on stderr (never a token)."""
    tokens = tmp_path / "tokens"
    tokens.write_text("write secret-token-value\n")
    tokens.chmod(mode)
    done = run_cli("serve", "--data-dir", str(tmp_path / "d"), "--transport", "http", "--port", "0", "--tokens-file", str(tokens))
    assert done.returncode == 2
    assert f"{mode:04o}".encode() in done.stderr and b"chmod 600" in done.stderr
    assert b"secret-token-value" not in done.stderr
    assert not (tmp_path / "d").exists()


def test_loopback_without_tokens_warns_that_it_is_no_user_boundary(tmp_path: Path) -> None:
    server = HttpServer(tmp_path / "data")
    try:
        banner = b"".join(server.stderr_lines).decode()
    finally:
        server.close()
    assert "loopback is not a user boundary" in banner and "--tokens-file" in banner
