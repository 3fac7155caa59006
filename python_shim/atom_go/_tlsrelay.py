"""A local TLS relay for go-plugin's AutoMTLS.

go-plugin's plugin side makes an ECDSA P-521 server certificate, which TLS 1.3 can only use with
the ecdsa_secp521r1_sha512 signature scheme. grpcio's TLS stack (BoringSSL) does not offer that
scheme, so the plugin refuses grpcio's handshake ("tls: peer doesn't support any of the
certificate's signature algorithms"). Python's ssl module (OpenSSL) does offer it. The relay
listens on a Unix socket inside the host's private (0700) socket directory; for every connection
grpc makes there it opens a mutually authenticated TLS connection to the plugin with OpenSSL
(the host's certificate and key, trusting exactly the certificate from the handshake line,
server name ``localhost``) and copies bytes both ways on one asyncio thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import tempfile
import threading
from concurrent.futures import Future

log = logging.getLogger("atom_go.plugin")

_CHUNK = 1 << 18


def client_context(cert_pem: bytes, key_pem: bytes, server_cert_pem: bytes, private_dir: str) -> ssl.SSLContext:
    """An OpenSSL client context: present cert/key, trust only server_cert_pem.

    The key passes through a file in private_dir (ssl reads certificate chains from files
    only); the file is removed before this returns.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = True
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cadata=server_cert_pem.decode("ascii"))
    # load_cert_chain reads files only: write the pair into a private temporary file.
    fd, path = tempfile.mkstemp(prefix="client-", suffix=".pem", dir=private_dir)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(cert_pem + b"\n" + key_pem)
        ctx.load_cert_chain(path)
    finally:
        os.unlink(path)
    ctx.set_alpn_protocols(["h2"])
    return ctx


class TLSRelay:
    """Listens on ``listen_path``; relays each connection to ``target_path`` over TLS."""

    def __init__(self, listen_path: str, target_path: str, ctx: ssl.SSLContext, server_name: str) -> None:
        self.listen_path = listen_path
        self._target = target_path
        self._ctx = ctx
        self._server_name = server_name
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name="atom-plugin-tls-relay", daemon=True)
        self.errors: list[str] = []

    def start(self) -> None:
        """Binds the listening socket (mode 0600) and starts the relay thread."""
        self._thread.start()
        fut: Future[None] = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        fut.result(timeout=10.0)

    async def _listen(self) -> None:
        self._server = await asyncio.start_unix_server(self._handle, path=self.listen_path)
        os.chmod(self.listen_path, 0o600)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            try:
                up_r, up_w = await asyncio.open_unix_connection(
                    self._target, ssl=self._ctx, server_hostname=self._server_name, limit=_CHUNK
                )
            except (OSError, ssl.SSLError) as exc:
                msg = f"AutoMTLS: TLS connection to the plugin at {self._target} failed: {exc}"
                self.errors.append(msg)
                log.error("%s", msg)
                writer.close()
                return
            await asyncio.gather(self._pipe(reader, up_w), self._pipe(up_r, writer), return_exceptions=True)
        finally:
            if task is not None:
                self._tasks.discard(task)

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await src.read(_CHUNK)
                if not data:
                    break
                dst.write(data)
                await dst.drain()
        except (OSError, ssl.SSLError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(Exception):
                dst.close()

    def close(self) -> None:
        """Stops listening, drops every connection and ends the thread."""
        if not self._thread.is_alive():
            return

        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for t in list(self._tasks):
                t.cancel()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=5.0)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5.0)
        if not self._thread.is_alive():
            self._loop.close()
