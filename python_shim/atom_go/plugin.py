"""A go-plugin host in Python: starts atom-plugin and connects to its gRPC server.

It does what go-plugin's Go client does (the wire contract is docs/go-plugin-protocol.md): set the
magic cookie and ``PLUGIN_PROTOCOL_VERSIONS``, give the plugin a private socket directory, read
and check the handshake line, use AutoMTLS, dial gRPC with unlimited message sizes, check
health, drain the GRPCStdio stream and the child's own stdout/stderr into Python logging, and
stop the plugin through the GRPCController (then kill it after a grace period). The child is
tied to its parent with PR_SET_PDEATHSIG (SIGTERM, which atom-plugin answers by removing its
socket and socket directory and exiting; it also watches its parent itself), and a plugin that
exits on its own is noticed at once: its socket directory is removed, callbacks run and every
later call raises PluginDiedError. A dead plugin is not restarted behind the caller's back;
start a new PluginProcess.

This module is the process half (the binary, the environment, the handshake line, the child's
output, its death and its shutdown); atom_go.connection is the connection half (the channel and
go-plugin's services on it); the errors are in atom_go.errors and re-exported here.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

import grpc

from atom_go._goplugin import ServingStatus, StdioChannel, read_stdio
from atom_go._procutil import describe_exit as _describe_exit
from atom_go._procutil import format_hclog as _format_hclog
from atom_go._procutil import pdeathsig_preexec as _pdeathsig_preexec
from atom_go._procutil import private_socket_dir as _private_socket_dir
from atom_go.connection import PluginConnection
from atom_go.errors import PluginDiedError, PluginError, PluginNotFoundError, PluginRPCError, PluginStartError
from atom_go.handshake import MAX_HANDSHAKE_BYTES, Handshake, HandshakeError, parse_handshake
from atom_go.versions import MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE, PROTOCOL_VERSION

if TYPE_CHECKING:
    from atom_go.tls import ClientCertificate

__all__ = [
    "BINARY_NAME",
    "DEFAULT_SHUTDOWN_GRACE",
    "DEFAULT_START_TIMEOUT",
    "ENV_PLUGIN_PATH",
    "PluginDiedError",
    "PluginError",
    "PluginNotFoundError",
    "PluginProcess",
    "PluginRPCError",
    "PluginStartError",
    "find_plugin_binary",
    "packaged_binary",
]

log = logging.getLogger("atom_go.plugin")

BINARY_NAME = "atom-plugin"
ENV_PLUGIN_PATH = "ATOM_GO_PLUGIN"

# go-plugin's client waits this long for the handshake line.
DEFAULT_START_TIMEOUT = 60.0
# go-plugin's client waits this long after Shutdown before it kills the plugin.
DEFAULT_SHUTDOWN_GRACE = 2.0
# Lines of the plugin's stderr kept for error messages.
_STDERR_TAIL_LINES = 40
_BUILD_HINT = (
    "Build it into the package with `make python-plugin` in the atom-go repository and reinstall "
    f"python_shim, set {ENV_PLUGIN_PATH}=/path/to/atom-plugin, or put atom-plugin on PATH."
)


def packaged_binary() -> str:
    """Where a wheel built with the binary ships it (atom_go/bin/atom-plugin)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", BINARY_NAME)


def _usable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_plugin_binary(path: str | os.PathLike[str] | None = None) -> str:
    """Returns the atom-plugin binary to start.

    In order: ``path`` when given, ``$ATOM_GO_PLUGIN``, the binary shipped inside the package,
    ``atom-plugin`` on PATH. An explicit path or ``$ATOM_GO_PLUGIN`` that is not an executable
    file is an error (it is not silently skipped).
    """
    if path is not None:
        p = os.fspath(path)
        if not _usable(p):
            raise PluginNotFoundError(f"atom-plugin binary {p!r} does not exist or is not executable. " + _BUILD_HINT)
        return os.path.abspath(p)
    env = os.environ.get(ENV_PLUGIN_PATH)
    if env:
        if not _usable(env):
            raise PluginNotFoundError(
                f"{ENV_PLUGIN_PATH}={env!r} does not name an executable file. "
                f"Point {ENV_PLUGIN_PATH} at the atom-plugin binary (build it with `make build`) or unset it."
            )
        return os.path.abspath(env)
    shipped = packaged_binary()
    if _usable(shipped):
        return shipped
    found = shutil.which(BINARY_NAME)
    if found:
        return os.path.abspath(found)
    raise PluginNotFoundError(
        f"atom-plugin binary not found (looked at ${ENV_PLUGIN_PATH}, {shipped} and PATH). " + _BUILD_HINT
    )


class PluginProcess:
    """One running atom-plugin subprocess and the gRPC channel to it.

    ``start()`` (or the context manager) launches it; ``channel`` is then a ready gRPC channel
    to its server. Callbacks given to ``add_death_callback`` run (on a watcher thread) when the
    process exits without ``shutdown()`` having been called.

    The plugin's socket is in a fresh directory of mode 0700 (in ``socket_dir``, else the
    system's temporary directory), which is removed when the plugin stops or dies; the plugin
    removes it too when it stops on its own, on SIGTERM, or once its host is gone.

    ``auto_mtls`` turns on go-plugin's AutoMTLS (off by default, as in go-plugin's Go client and
    atom-go's: the socket lives in a directory only this user can enter, so mutual TLS keeps out
    no one who could not read this process's memory anyway, and it costs two key generations at
    start-up and TLS on every message; ``ATOM_GO_AUTO_MTLS=1`` turns it on for the vLLM and SGLang
    hosts). grpcio cannot verify the P-521 certificate go-plugin makes, so with AutoMTLS the
    channel goes through a local OpenSSL relay (atom_go._tlsrelay), one extra copy per message.

    On Linux the child gets SIGTERM when the thread that started it exits (PR_SET_PDEATHSIG):
    start it from a thread that lives as long as the plugin is used (a process's main thread).
    """

    def __init__(
        self,
        binary: str | os.PathLike[str] | None = None,
        *,
        args: Sequence[str] = (),
        auto_mtls: bool = False,
        app_versions: Collection[int] = (PROTOCOL_VERSION,),
        start_timeout: float = DEFAULT_START_TIMEOUT,
        env: Mapping[str, str] | None = None,
        socket_dir: str | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        if start_timeout <= 0:
            raise ValueError(f"start_timeout must be positive, got {start_timeout}")
        if not app_versions:
            raise ValueError("app_versions must name at least one protocol version")
        self._binary_arg = binary
        self._args = list(args)
        self._auto_mtls = auto_mtls
        self._app_versions = tuple(sorted(set(app_versions)))
        self._start_timeout = start_timeout
        self._extra_env = dict(env or {})
        self._socket_base = socket_dir
        self.log = logger or log

        self.binary: str | None = None
        self.handshake: Handshake | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: PluginConnection | None = None
        self._sockdir: str | None = None
        self._threads: list[threading.Thread] = []
        self._stdout_lines: queue.Queue[bytes | None] = queue.Queue()
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=_STDERR_TAIL_LINES)
        self._stderr_done = threading.Event()
        self._lock = threading.Lock()
        self._closing = False
        self._exited = threading.Event()
        self._death: PluginDiedError | None = None
        self._callbacks: list[Callable[[PluginDiedError], None]] = []

    # ----------------------------------------------------------------------------- start-up

    def start(self) -> PluginProcess:
        """Starts the plugin and connects; raises PluginNotFoundError or PluginStartError."""
        if self._proc is not None:
            raise PluginError("this PluginProcess was already started; make a new one to restart the plugin")
        self.binary = find_plugin_binary(self._binary_arg)
        try:
            self._start()
        except BaseException:
            self._teardown(kill=True)
            raise
        return self

    def _start(self) -> None:
        assert self.binary is not None
        sockdir = self._sockdir = _private_socket_dir(self._socket_base)
        env = dict(os.environ)
        env.update(self._extra_env)
        env[MAGIC_COOKIE_KEY] = self._extra_env.get(MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE)
        env["PLUGIN_PROTOCOL_VERSIONS"] = ",".join(str(v) for v in self._app_versions)
        env["PLUGIN_UNIX_SOCKET_DIR"] = sockdir
        env.pop("PLUGIN_MULTIPLEX_GRPC", None)
        cert = None
        if self._auto_mtls:
            from atom_go.tls import generate_client_certificate

            cert = generate_client_certificate()
            env["PLUGIN_CLIENT_CERT"] = cert.cert_pem.decode("ascii")
        else:
            env.pop("PLUGIN_CLIENT_CERT", None)
        try:
            self._proc = subprocess.Popen(
                [self.binary, *self._args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                close_fds=True,
                preexec_fn=_pdeathsig_preexec(),  # noqa: PLW1509 - prctl only, no locks
            )
        except OSError as exc:
            raise PluginStartError(f"cannot start {self.binary}: {exc}. " + _BUILD_HINT) from exc
        self.log.debug("started %s (pid %d)", self.binary, self._proc.pid)
        assert self._proc.stdout is not None and self._proc.stderr is not None
        self._spawn(self._read_stdout, self._proc.stdout, name="stdout")
        self._spawn(self._read_stderr, self._proc.stderr, name="stderr")
        self._spawn(self._watch, name="watch")
        line = self._wait_handshake_line()
        try:
            self.handshake = parse_handshake(line, self._app_versions, plugin_path=self.binary)
        except HandshakeError as exc:
            raise PluginStartError(str(exc)) from None
        if self.handshake.network == "unix" and os.path.dirname(self.handshake.address) != sockdir:
            raise PluginStartError(
                f"the plugin listens on {self.handshake.address}, outside the private directory {sockdir} it was given"
            )
        if cert is not None and self.handshake.server_cert_der is None:
            raise PluginStartError(
                f"{self.binary} sent no server certificate although AutoMTLS was requested "
                "(PLUGIN_CLIENT_CERT): it is not a go-plugin server with AutoMTLS support"
            )
        self._connect(cert, sockdir)

    def _spawn(self, fn: Callable[..., None], *args: Any, name: str) -> None:
        pid = self._proc.pid if self._proc else 0
        t = threading.Thread(target=fn, args=args, name=f"atom-plugin-{pid}-{name}", daemon=True)
        t.start()
        self._threads.append(t)

    def _wait_handshake_line(self) -> bytes:
        assert self._proc is not None
        deadline = time.monotonic() + self._start_timeout
        try:
            line = self._stdout_lines.get(timeout=self._start_timeout)
        except queue.Empty:
            raise PluginStartError(
                f"{self.binary} printed no handshake line within {self._start_timeout:g} s" + self._stderr_summary()
            ) from None
        if line is not None:
            return line
        # stdout closed before the handshake: the plugin exited (or closed stdout and hangs).
        try:
            rc = self._proc.wait(timeout=max(0.1, min(5.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            rc = None
        self._stderr_done.wait(timeout=5.0)
        stderr = "\n".join(self._stderr_tail)
        if "This binary is a plugin" in stderr:
            raise PluginStartError(
                f"{self.binary} refused the magic cookie {MAGIC_COOKIE_KEY}: it is not the atom-plugin "
                "of this atom-go release. Rebuild it (`make build` / `make python-plugin`) or point "
                f"{ENV_PLUGIN_PATH} at a matching binary.\nplugin stderr:\n{stderr}"
            )
        status = "is still running" if rc is None else _describe_exit(rc)
        raise PluginStartError(
            f"{self.binary} closed its stdout before the handshake and {status}" + self._stderr_summary()
        )

    def _connect(self, cert: ClientCertificate | None, sockdir: str) -> None:
        assert self.handshake is not None and self.binary is not None
        self._conn = PluginConnection(
            self.handshake,
            binary=self.binary,
            cert=cert,
            socket_dir=sockdir,
            timeout=max(1.0, self._start_timeout),
            exited=self._exited,
            death=lambda: self._death,
            stderr_summary=self._stderr_summary,
        )
        self.check_health()
        self._spawn(self._drain_stdio, self._conn.open_stdio(), name="stdio")

    # ----------------------------------------------------------------------------- readers

    def _read_stdout(self, pipe: IO[bytes]) -> None:
        first = True
        with pipe:
            while True:
                line = pipe.readline(MAX_HANDSHAKE_BYTES + 1)
                if not line:
                    break
                if first:
                    first = False
                    self._stdout_lines.put(line)
                    continue
                self._log_line("stdout", line)
        if first:
            self._stdout_lines.put(None)

    def _read_stderr(self, pipe: IO[bytes]) -> None:
        try:
            with pipe:
                for raw in iter(lambda: pipe.readline(1 << 20), b""):
                    text = raw.decode("utf-8", "replace").rstrip("\r\n")
                    self._stderr_tail.append(text)
                    self._log_line("stderr", raw)
        finally:
            self._stderr_done.set()

    def _log_line(self, stream: str, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not text:
            return
        parsed = _format_hclog(text)
        if parsed is not None:
            self.log.log(parsed[0], "%s", parsed[1])
        else:
            self.log.info("[%s] %s", stream, text)

    def _drain_stdio(self, call: Any) -> None:
        try:
            for channel, data in read_stdio(call):
                name = "stderr" if channel == StdioChannel.STDERR else "stdout"
                for raw in data.splitlines():
                    self._log_line(name, raw)
        except grpc.RpcError as exc:
            if exc.code() not in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE):
                self.log.debug("StreamStdio ended: %s", exc)

    def _watch(self) -> None:
        assert self._proc is not None
        rc = self._proc.wait()
        self._stderr_done.wait(timeout=2.0)
        with self._lock:
            closing = self._closing
        if not closing:
            self._remove_sockdir()
        with self._lock:
            if not closing:
                self._death = PluginDiedError(
                    f"atom-plugin (pid {self._proc.pid}) {_describe_exit(rc)}" + self._stderr_summary(), rc
                )
            callbacks = list(self._callbacks)
            death = self._death
        self._exited.set()
        if closing or death is None:
            return
        self.log.error("%s", death)
        for cb in callbacks:
            try:
                cb(death)
            except Exception:
                self.log.exception("plugin death callback %r failed", cb)

    def _stderr_summary(self) -> str:
        tail = [line for line in self._stderr_tail if line.strip()]
        if not tail:
            return ""
        return "\nlast lines of the plugin's stderr:\n" + "\n".join(tail[-15:])

    # ----------------------------------------------------------------------------- state

    @property
    def pid(self) -> int:
        """The plugin's process id."""
        if self._proc is None:
            raise PluginError("the plugin was not started")
        return self._proc.pid

    @property
    def channel(self) -> grpc.Channel:
        """The gRPC channel to the plugin (AtomEngine and go-plugin's services)."""
        self.raise_if_dead()
        if self._conn is None:
            raise PluginError("the plugin was not started")
        return self._conn.channel

    @property
    def returncode(self) -> int | None:
        """The exit status once the process exited, else None."""
        return None if self._proc is None else self._proc.poll()

    def alive(self) -> bool:
        """True while the process runs and shutdown() was not called."""
        return self._proc is not None and not self._exited.is_set() and self._proc.poll() is None and not self._closing

    @property
    def death(self) -> PluginDiedError | None:
        """Why the plugin died on its own, or None."""
        return self._death

    def raise_if_dead(self) -> None:
        """Raises PluginDiedError when the plugin exited on its own, PluginError after shutdown."""
        if self._death is not None:
            raise self._death
        if self._closing:
            raise PluginError("the plugin was shut down")

    def wait_exit(self, timeout: float | None = None) -> bool:
        """Waits until the watcher saw the process exit; False on timeout."""
        return self._exited.wait(timeout)

    def add_death_callback(self, cb: Callable[[PluginDiedError], None]) -> None:
        """Registers cb(error), called once if the plugin exits on its own (now, if it has)."""
        with self._lock:
            death = self._death
            if death is None:
                self._callbacks.append(cb)
        if death is not None:
            cb(death)

    def check_health(self, timeout: float = 5.0) -> None:
        """go-plugin's ping: grpc.health.v1 Check(service="plugin") must answer SERVING."""
        self.raise_if_dead()
        if self._conn is None:
            raise PluginError("the plugin was not started")
        try:
            st = self._conn.health(timeout)
        except grpc.RpcError as exc:
            raise self.rpc_error("Health/Check", exc) from None
        if st != ServingStatus.SERVING:
            raise PluginError(f"atom-plugin health check: the plugin is {st.name}, not SERVING")

    def rpc_error(self, method: str, exc: grpc.RpcError) -> PluginError:
        """Turns a failed RPC into PluginDiedError when the plugin is gone, else PluginRPCError."""
        code: grpc.StatusCode = exc.code()
        details: str = exc.details() or ""
        gone = code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
        if gone and self._proc is not None and not self._closing:
            # The channel may notice a dead peer a moment before waitpid does.
            self._exited.wait(timeout=2.0)
        if self._death is not None:
            return self._death
        if self._closing and gone:
            return PluginError(f"{method}: the plugin was shut down")
        return PluginRPCError(method, code, details)

    # ----------------------------------------------------------------------------- shutdown

    def shutdown(self, grace: float = DEFAULT_SHUTDOWN_GRACE) -> int | None:
        """Stops the plugin: GRPCController/Shutdown, then SIGKILL after ``grace`` seconds.

        Returns the exit status (None if it was never started). Safe to call more than once.
        """
        with self._lock:
            self._closing = True
        proc = self._proc
        if proc is None:
            self._teardown(kill=False)
            return None
        if proc.poll() is None and self._conn is not None:
            with contextlib.suppress(grpc.RpcError):
                self._conn.shutdown(grace)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.log.warning("atom-plugin (pid %d) still runs %g s after Shutdown: killing it", proc.pid, grace)
        self._teardown(kill=True)
        return proc.returncode

    def kill(self) -> None:
        """Kills the plugin at once (SIGKILL) and releases everything."""
        with self._lock:
            self._closing = True
        self._teardown(kill=True)

    def _teardown(self, kill: bool) -> None:
        with self._lock:
            self._closing = True
        proc = self._proc
        if proc is not None and proc.poll() is None and kill:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10.0)
        if self._conn is not None:
            self._conn.close()
        current = threading.current_thread()
        for t in self._threads:
            if t is not current:
                t.join(timeout=5.0)
        self._remove_sockdir()

    def _remove_sockdir(self) -> None:
        with self._lock:
            path, self._sockdir = self._sockdir, None
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)

    @property
    def socket_dir(self) -> str | None:
        """The plugin's private socket directory while it exists."""
        return self._sockdir

    def __enter__(self) -> PluginProcess:
        if self._proc is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
