"""MCP over Streamable HTTP at /mcp, served by uvicorn, with optional bearer tokens."""
from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Callable
from typing import Any

import uvicorn
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette

from .app import build_server
from .limits import MAX_REQUEST_BODY
from .tokens import StaticTokenVerifier, Token

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"


class InsecureBindError(ValueError):
    """Serving a non-loopback address without tokens would expose the memory to the network."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _transport_security(host: str) -> TransportSecuritySettings | None:
    """DNS-rebinding protection for loopback binds: a web page in the user's browser must not
    reach the local server under a hostile Host name. Non-loopback binds need tokens instead."""
    if not is_loopback(host):
        return None
    hosts = ["127.0.0.1", "localhost", "[::1]"]
    bare = host.strip("[]")
    own = f"[{bare}]" if ":" in bare else bare
    if own not in hosts:
        hosts.append(own)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{h}:*" for h in hosts],
        allowed_origins=[f"http://{h}:*" for h in hosts],
    )


def check_bind(host: str, tokens: list[Token] | None) -> None:
    if not tokens and not is_loopback(host):
        raise InsecureBindError(
            f"refusing to serve on {host} without --tokens-file: anyone who can reach the port "
            "could read and change the memory; bind to 127.0.0.1 or give a tokens file"
        )


def build_http_app(store: Any, version: str, host: str, port: int, tokens: list[Token] | None) -> Starlette:
    check_bind(host, tokens)
    server = build_server(store, version)
    auth: dict[str, Any] = {}
    if tokens:
        auth = {
            "token_verifier": StaticTokenVerifier(tokens),
            # The SDK only enforces tokens with AuthSettings present; convmem issues no tokens
            # itself, so the issuer URL is this server and no OAuth routes are added.
            "auth": AuthSettings(issuer_url=f"http://{_url_host(host)}:{port}", resource_server_url=None),
        }
    return server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        json_response=True,
        max_request_body_size=MAX_REQUEST_BODY,
        transport_security=_transport_security(host),
        host=host,
        **auth,
    )


def _url_host(host: str) -> str:
    bare = host.strip("[]")
    return f"[{bare}]" if ":" in bare else bare


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind before serving so port 0 works and the real port can be announced."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    # Listen now: the URL is announced before uvicorn starts, and a client that connects at
    # once must wait in the backlog instead of being refused.
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve_http(
    store: Any,
    version: str,
    host: str,
    port: int,
    tokens: list[Token] | None,
    log_level: str,
    announce: Callable[[str], None],
) -> None:
    """Serve until SIGINT/SIGTERM (uvicorn's graceful shutdown). `announce` receives the URL."""
    check_bind(host, tokens)
    sock = bind_socket(host, port)
    actual_port = sock.getsockname()[1]
    app = build_http_app(store, version, host, actual_port, tokens)
    # log_config=None: uvicorn's own config would send access logs to stdout.
    config = uvicorn.Config(app, log_config=None, log_level=log_level.lower(), access_log=False, lifespan="on")
    announce(f"http://{_url_host(host)}:{actual_port}{MCP_PATH}")
    uvicorn.Server(config).run(sockets=[sock])
