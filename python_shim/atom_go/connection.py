"""The connection half of atom-go's go-plugin host: from a parsed handshake to a ready channel.

atom_go.plugin.PluginProcess starts atom-plugin and reads its handshake line; PluginConnection
then dials the address it names with unlimited message sizes (through a local OpenSSL relay
when AutoMTLS is on: grpcio cannot verify go-plugin's P-521 certificate), waits until the
channel is ready, and speaks go-plugin's own services on it (health, GRPCStdio,
GRPCController/Shutdown). The wire contract is in docs/go-plugin-protocol.md.
"""

from __future__ import annotations

import os
import ssl
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

from atom_go._goplugin import GoPluginServices, ServingStatus
from atom_go.errors import PluginDiedError, PluginStartError
from atom_go.handshake import Handshake
from atom_go.versions import GRPC_SERVICE_NAME

if TYPE_CHECKING:
    from atom_go._tlsrelay import TLSRelay
    from atom_go.tls import ClientCertificate

# go-plugin's client dials without message size limits.
_CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
]


class PluginConnection:
    """The gRPC channel to one started plugin and go-plugin's services on it.

    Constructing it dials and waits until the channel is ready, or raises PluginStartError: when
    the TLS relay fails, when ``exited`` is set (the process is gone; ``death`` says why), or
    after ``timeout`` seconds (``stderr_summary`` then adds the plugin's last words). ``close``
    releases the channel, the GRPCStdio stream and the relay; it is safe to call more than once.
    """

    def __init__(
        self,
        handshake: Handshake,
        *,
        binary: str,
        cert: ClientCertificate | None,
        socket_dir: str,
        timeout: float,
        exited: threading.Event,
        death: Callable[[], PluginDiedError | None],
        stderr_summary: Callable[[], str],
    ) -> None:
        self.handshake = handshake
        self._relay: TLSRelay | None = None
        self._stdio_call: Any = None
        self._closed = False
        try:
            target = self._target(cert, socket_dir, stderr_summary)
            self.channel: grpc.Channel = grpc.insecure_channel(target, options=_CHANNEL_OPTIONS)
            self._wait_ready(binary, timeout, exited, death, stderr_summary)
        except BaseException:
            self.close()
            raise
        self.services = GoPluginServices(self.channel)

    def _target(self, cert: ClientCertificate | None, socket_dir: str, stderr_summary: Callable[[], str]) -> str:
        hs = self.handshake
        if cert is None:
            return hs.grpc_target
        from atom_go._tlsrelay import TLSRelay, client_context
        from atom_go.tls import TLS_SERVER_NAME

        if hs.network != "unix":
            raise PluginStartError(
                f"AutoMTLS over {hs.network} is not supported; the plugin should listen on a unix socket"
            )
        server_pem = hs.server_cert_pem()
        assert server_pem is not None
        try:
            ctx = client_context(cert.cert_pem, cert.key_pem, server_pem, socket_dir)
        except ssl.SSLError as exc:
            raise PluginStartError(f"AutoMTLS: the plugin's certificate cannot be used: {exc}") from None
        except OSError as exc:  # the plugin died and its socket directory went with it
            raise PluginStartError(
                f"AutoMTLS: cannot set up the TLS relay in {socket_dir}: {exc}" + stderr_summary()
            ) from None
        self._relay = TLSRelay(os.path.join(socket_dir, "tls-relay"), hs.address, ctx, TLS_SERVER_NAME)
        self._relay.start()
        return "unix:" + self._relay.listen_path

    def _wait_ready(
        self,
        binary: str,
        timeout: float,
        exited: threading.Event,
        death: Callable[[], PluginDiedError | None],
        stderr_summary: Callable[[], str],
    ) -> None:
        deadline = time.monotonic() + timeout
        ready = grpc.channel_ready_future(self.channel)
        while True:
            try:
                ready.result(timeout=0.2)
                return
            except grpc.FutureTimeoutError:
                relay_error = self._relay.errors[-1] if self._relay is not None and self._relay.errors else ""
                if relay_error or exited.is_set() or time.monotonic() > deadline:
                    ready.cancel()
                    died = death()
                    why = relay_error or (died and str(died)) or (f"not ready within {timeout:g} s" + stderr_summary())
                    raise PluginStartError(
                        f"cannot connect to {binary} at {self.handshake.grpc_target}: {why}"
                    ) from None

    def health(self, timeout: float) -> ServingStatus:
        """go-plugin's ping: grpc.health.v1 Check(service="plugin"); raises grpc.RpcError."""
        return self.services.health(GRPC_SERVICE_NAME, timeout=timeout)

    def open_stdio(self) -> Any:
        """Opens the GRPCStdio stream (read it with atom_go._goplugin.read_stdio); close cancels it."""
        self._stdio_call = self.services.open_stdio()
        return self._stdio_call

    def shutdown(self, timeout: float) -> None:
        """GRPCController/Shutdown; raises grpc.RpcError."""
        self.services.shutdown(timeout=timeout)

    def close(self) -> None:
        """Cancels the stdio stream, closes the channel and stops the relay."""
        if self._closed:
            return
        self._closed = True
        if self._stdio_call is not None:
            self._stdio_call.cancel()
        channel = getattr(self, "channel", None)
        if channel is not None:
            channel.close()
        if self._relay is not None:
            self._relay.close()
