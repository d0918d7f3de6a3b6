"""A git smart-HTTP server on 127.0.0.1: git's own `git http-backend` (CGI) behind a small
http.server, serving the repositories under one directory, pushes included. It keeps the
Host header of every request, so a test sees which name git asked for."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class GitHttpServer:
    port: int
    hosts: list[str] = field(default_factory=list)


def _handler(root: Path, server: GitHttpServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _backend(self) -> None:
            server.hosts.append(self.headers.get("Host", ""))
            path, _, query = self.path.partition("?")
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            env = {
                "PATH": os.environ["PATH"],
                "GIT_PROJECT_ROOT": str(root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "REQUEST_METHOD": self.command,
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "REMOTE_ADDR": self.client_address[0],
                "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            }
            out = subprocess.run(
                ["git", "-c", "http.receivepack=true", "http-backend"],
                input=body,
                env=env,
                capture_output=True,
                check=False,
            ).stdout
            head, _, payload = out.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = next((h for h in lines if h.lower().startswith("status:")), "Status: 200")
            self.send_response(int(status.split()[1]))
            for line in lines:
                name, _, value = line.partition(":")
                if name.lower() != "status" and value:
                    self.send_header(name, value.strip())
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = _backend
        do_POST = _backend

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@contextmanager
def git_http_server(root: Path) -> Iterator[GitHttpServer]:
    """Serve the repositories under `root` at http://127.0.0.1:<port>/<path under root>."""
    http = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    served = GitHttpServer(http.server_address[1])
    http.RequestHandlerClass = _handler(root, served)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        http.shutdown()
        http.server_close()
