"""A git HTTP(S) server that only wants credentials: every request is answered 401 with
`WWW-Authenticate: Basic`, and every Authorization header sent to it is kept."""

from __future__ import annotations

import base64
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class Seen:
    paths: list[str] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)

    def credentials(self) -> list[str]:
        """`user:token` of each Basic header received."""
        found = []
        for header in self.authorizations:
            kind, _, value = header.partition(" ")
            found.append(base64.b64decode(value).decode() if kind == "Basic" else header)
        return found


@dataclass
class Seeker:
    port: int
    seen: Seen
    scheme: str

    def url(self, path: str = "r.git") -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}/{path}"

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"


def _handler(seen: Seen) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _deny(self) -> None:
            seen.paths.append(self.path)
            if auth := self.headers.get("Authorization"):
                seen.authorizations.append(auth)
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="give me your token"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = _deny
        do_POST = _deny

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made by the openssl CLI."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@contextmanager
def credential_seeker(tls: tuple[Path, Path] | None = None) -> Iterator[Seeker]:
    seen = Seen()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(seen))
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Seeker(server.server_address[1], seen, "https" if tls else "http")
    finally:
        server.shutdown()
        server.server_close()
