"""The serving certificate: a cert/key pair from files, re-read when either file changes (a rotated Secret
takes effect without a restart), or a self-signed pair generated at start (self_signed.py).

Each new connection asks for the current context; the files are looked at (stat only) at most once per
`check_interval`. A pair that does not load (a key written before its certificate, a half-written file) keeps
the previous context serving and is retried at the next check; only the first load must succeed."""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

CHECK_INTERVAL = 1.0  # seconds between looks at the files


class TLSFilesError(ValueError):
    """The certificate or key cannot be used; the message names the file (never its content)."""


def server_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    for path in (cert_file, key_file):  # OpenSSL's error would not say which file
        if not path.is_file():
            raise TLSFilesError(f"{path}: no such file")
    try:
        context.load_cert_chain(cert_file, key_file)
    except OSError as exc:
        if not isinstance(exc, ssl.SSLError):
            raise TLSFilesError(f"{cert_file} / {key_file}: cannot read: {exc.strerror or exc}") from None
        raise TLSFilesError(f"{cert_file} / {key_file}: not a matching PEM certificate and key "
                            f"({exc.reason})") from None
    return context


def _stamp(path: Path) -> tuple[int, int, int] | None:
    # A Secret volume swaps a symlink: stat follows it, so the inode changes with the content.
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class ServingCertificate:
    def __init__(self, cert_file: Path, key_file: Path, *, check_interval: float = CHECK_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self._check_interval = check_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._stamps = (_stamp(cert_file), _stamp(key_file))
        self._context = server_context(cert_file, key_file)  # TLSFilesError: the caller refuses to start
        self._next_check = clock() + check_interval
        self.reloads = 0

    def context(self) -> ssl.SSLContext:
        """The context for a new connection, reloaded first when the files changed."""
        with self._lock:
            now = self._clock()
            if now < self._next_check:
                return self._context
            self._next_check = now + self._check_interval
            stamps = (_stamp(self.cert_file), _stamp(self.key_file))
            if stamps == self._stamps:
                return self._context
            try:
                self._context = server_context(self.cert_file, self.key_file)
            except TLSFilesError as exc:
                log.warning("serving certificate changed but does not load (still serving the previous one): %s",
                            exc)
                return self._context
            self._stamps = stamps
            self.reloads += 1
            log.info("serving certificate reloaded from %s", self.cert_file)
            return self._context
