"""A command's output as the runners keep it: the last bytes written to its pipe, read
while it runs so a flood cannot fill memory, and how many bytes there were in all."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from typing import IO

from loopworks.checks.redaction import redact


class OutputTail:
    def __init__(self, cap: int) -> None:
        self.cap = max(cap, 0)
        self.total = 0
        self._buf = bytearray()
        self._lock = threading.Lock()

    def pump(self, stream: IO[bytes]) -> None:
        fd = stream.fileno()
        while chunk := os.read(fd, 65536):
            with self._lock:
                self.total += len(chunk)
                self._buf += chunk
                del self._buf[: max(len(self._buf) - self.cap, 0)]

    def render(self, secrets: Iterable[str] = ()) -> str:
        """What was kept, redacted of `secrets` (see `loopworks.checks.redaction`), with a
        note when the start was cut."""
        with self._lock:
            text = self._buf.decode("utf-8", errors="replace")
            truncated = self.total > len(self._buf)
            text = redact(text, secrets, cut_at_start=truncated)
            if truncated:
                return f"[output truncated: last {len(self._buf)} of {self.total} bytes]\n{text}"
            return text
