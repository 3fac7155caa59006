"""Process helpers of atom_go.plugin: the child's death signal, its private socket directory,
hclog's JSON lines and exit statuses."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import logging
import os
import signal
import stat
import sys
import tempfile
from collections.abc import Callable

from atom_go.errors import PluginStartError

# sun_path holds 108 bytes; go-plugin appends "/plugin" and up to 10 digits.
_MAX_SOCKET_DIR_LEN = 80


def pdeathsig_preexec() -> Callable[[], None] | None:
    """A preexec_fn that makes the child receive SIGTERM when its parent thread exits (Linux).

    SIGTERM rather than SIGKILL: atom-plugin stops on it and removes its socket and the socket
    directory, which a SIGKILLed plugin would leave behind (it exits within a few seconds even
    while a model load holds it)."""
    if not sys.platform.startswith("linux"):
        return None
    libc_name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        libc = ctypes.CDLL(libc_name, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    pr_set_pdeathsig = 1
    sigterm = int(signal.SIGTERM)
    sigkill = int(signal.SIGKILL)

    def preexec() -> None:
        # Runs in the forked child before exec: only async-signal-safe work.
        prctl(pr_set_pdeathsig, sigterm, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect: nothing to clean yet
            os.kill(os.getpid(), sigkill)

    return preexec


def private_socket_dir(base: str | None) -> str:
    """A new directory only this user can enter, short enough for a Unix socket path."""
    candidates = [base] if base else [tempfile.gettempdir(), "/tmp"]
    for d in candidates:
        if d and len(d) + len("/atomgo-XXXXXXXX") <= _MAX_SOCKET_DIR_LEN and os.path.isdir(d):
            path = tempfile.mkdtemp(prefix="atomgo-", dir=d)
            os.chmod(path, 0o700)
            mode = stat.S_IMODE(os.stat(path).st_mode)
            if mode != 0o700:
                raise PluginStartError(f"socket directory {path} has mode {mode:o}, want 700")
            return path
    raise PluginStartError(
        f"no directory for the plugin's socket: {candidates} are missing or longer than "
        f"{_MAX_SOCKET_DIR_LEN} characters (Unix socket paths are limited to 108 bytes)"
    )


def format_hclog(line: str) -> tuple[int, str] | None:
    """Turns one of hclog's JSON lines into (level, text); None when line is not one."""
    if not line.startswith("{"):
        return None
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    if not isinstance(rec, dict) or "@message" not in rec:
        return None
    level = {
        "trace": logging.DEBUG,
        "debug": logging.DEBUG,
        "info": logging.INFO,
        "warn": logging.WARNING,
        "error": logging.ERROR,
    }.get(str(rec.get("@level", "info")).lower(), logging.INFO)
    extras = " ".join(f"{k}={v}" for k, v in rec.items() if not k.startswith("@"))
    text = str(rec["@message"]) + (" " + extras if extras else "")
    return level, text


def describe_exit(rc: int) -> str:
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"was killed by {name}"
    return f"exited with status {rc}"
