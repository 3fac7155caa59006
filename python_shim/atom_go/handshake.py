"""go-plugin's handshake line, as a host that is not written in Go reads it.

A go-plugin server prints one line on its stdout once it serves::

    CORE|APP|NETWORK|ADDRESS|PROTOCOL|CERT[|MULTIPLEX]

CORE is go-plugin's own protocol version (1), APP the application protocol version the plugin
chose among those the host offered in ``PLUGIN_PROTOCOL_VERSIONS``, NETWORK ``unix`` or ``tcp``,
PROTOCOL ``grpc`` (atom-go speaks nothing else), CERT the server's certificate under AutoMTLS
(DER, base64 without padding; go-plugin treats it as a certificate only when it is longer than
50 characters) and MULTIPLEX an optional ``true``/``false`` (gRPC broker multiplexing).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from collections.abc import Collection

from atom_go.versions import CORE_PROTOCOL_VERSION, PROTOCOL_VERSION

# go-plugin's client ignores a CERT field of 50 characters or fewer.
_MIN_CERT_CHARS = 51

# Longest line accepted: a P-521 certificate is about 1 KiB of base64; leave ample room.
MAX_HANDSHAKE_BYTES = 64 * 1024

_NOT_A_HANDSHAKE_HINT = (
    "This usually means the file is not atom-go's atom-plugin binary, was built for another "
    "architecture, is missing libraries, or failed before it could serve"
)


class HandshakeError(ValueError):
    """The plugin's handshake line is malformed or names versions this host does not speak."""


@dataclasses.dataclass(frozen=True)
class Handshake:
    """A parsed handshake line."""

    core_version: int
    app_version: int
    network: str  # "unix" or "tcp"
    address: str  # socket path, or host:port
    protocol: str  # always "grpc"
    server_cert_der: bytes | None  # AutoMTLS: the plugin's certificate (DER)
    multiplex: bool | None  # the optional 7th field

    @property
    def grpc_target(self) -> str:
        """The address as a gRPC target string."""
        if self.network == "unix":
            return "unix:" + self.address
        return self.address

    def server_cert_pem(self) -> bytes | None:
        """The server certificate in PEM (what grpc's channel credentials take), or None."""
        if self.server_cert_der is None:
            return None
        return der_to_pem(self.server_cert_der)


def der_to_pem(der: bytes) -> bytes:
    """Wraps a DER certificate in PEM armour."""
    b64 = base64.b64encode(der).decode("ascii")
    lines = [b64[i : i + 64] for i in range(0, len(b64), 64)]
    return ("-----BEGIN CERTIFICATE-----\n" + "\n".join(lines) + "\n-----END CERTIFICATE-----\n").encode("ascii")


def _int_field(name: str, value: str, line: str) -> int:
    try:
        v = int(value, 10)
    except ValueError:
        raise HandshakeError(f"handshake line {line!r}: {name} {value!r} is not an integer") from None
    if v < 0:
        raise HandshakeError(f"handshake line {line!r}: {name} {v} is negative")
    return v


def decode_cert(field: str) -> bytes:
    """Decodes the CERT field: standard base64, padded or not (Go writes it unpadded)."""
    stripped = field.strip()
    padded = stripped + "=" * (-len(stripped) % 4)
    try:
        der = base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise HandshakeError(f"handshake certificate field is not base64: {exc}") from None
    _check_der_certificate(der)
    return der


def _check_der_certificate(der: bytes) -> None:
    # Parsed by cryptography when it is installed (it is a dependency of atom-go's AutoMTLS):
    # a corrupt certificate is reported here rather than as an opaque TLS failure later.
    try:
        from cryptography import x509
    except ImportError:  # pragma: no cover - cryptography is a declared dependency
        if not der.startswith(b"\x30"):
            raise HandshakeError("handshake certificate is not a DER certificate") from None
        return
    try:
        x509.load_der_x509_certificate(der)
    except ValueError as exc:
        raise HandshakeError(f"handshake certificate is not a valid DER X.509 certificate: {exc}") from None


def parse_handshake(
    line: str | bytes,
    accepted_app_versions: Collection[int] = (PROTOCOL_VERSION,),
    *,
    plugin_path: str = "atom-plugin",
) -> Handshake:
    """Parses and checks a handshake line.

    Raises HandshakeError, with a message that says what to do, when the line is not a
    handshake, a field is missing or malformed, the core protocol is not go-plugin's 1, the app
    protocol is not one of ``accepted_app_versions``, or the transport is not gRPC.
    """
    if isinstance(line, bytes):
        if len(line) > MAX_HANDSHAKE_BYTES:
            raise HandshakeError(f"handshake line of {len(line)} bytes, more than {MAX_HANDSHAKE_BYTES}")
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError:
            raise HandshakeError(
                f"{plugin_path} wrote a line that is not UTF-8 text where the handshake was expected. "
                + _NOT_A_HANDSHAKE_HINT
            ) from None
    if len(line) > MAX_HANDSHAKE_BYTES:
        raise HandshakeError(f"handshake line of {len(line)} characters, more than {MAX_HANDSHAKE_BYTES}")
    line = line.strip()
    if not line:
        raise HandshakeError(f"{plugin_path} wrote an empty line where the handshake was expected")
    parts = line.split("|")
    if len(parts) < 5:
        hint = _NOT_A_HANDSHAKE_HINT if len(parts) == 1 else "fields are missing"
        raise HandshakeError(
            f"{plugin_path} wrote {line!r} where go-plugin's handshake "
            f"CORE|APP|NETWORK|ADDRESS|PROTOCOL|CERT was expected ({len(parts)} fields). {hint}."
        )
    if len(parts) > 7:
        raise HandshakeError(f"handshake line {line!r} has {len(parts)} fields, at most 7 are defined")
    core = _int_field("core protocol version", parts[0], line)
    if core != CORE_PROTOCOL_VERSION:
        raise HandshakeError(
            f"{plugin_path} speaks go-plugin core protocol {core}, this host speaks "
            f"{CORE_PROTOCOL_VERSION}: the binary was built with an incompatible go-plugin. "
            "Install an atom-plugin binary from the same atom-go release as this Python package."
        )
    app = _int_field("app protocol version", parts[1], line)
    accepted = sorted(set(accepted_app_versions))
    if app not in accepted:
        raise HandshakeError(
            f"{plugin_path} speaks atom-go plugin protocol version {app}, this atom_go package "
            f"speaks {', '.join(map(str, accepted))}: the binary and the Python package are from "
            "different atom-go releases. Rebuild the binary into the package (`make python-plugin`, "
            "then reinstall python_shim) or point ATOM_GO_PLUGIN at a matching atom-plugin."
        )
    network, address, protocol = parts[2], parts[3], parts[4]
    if network not in ("unix", "tcp"):
        raise HandshakeError(f"handshake line {line!r}: network {network!r} is neither unix nor tcp")
    if not address:
        raise HandshakeError(f"handshake line {line!r}: the address is empty")
    if network == "unix" and not address.startswith("/"):
        raise HandshakeError(f"handshake line {line!r}: unix socket path {address!r} is not absolute")
    if network == "tcp":
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise HandshakeError(f"handshake line {line!r}: tcp address {address!r} is not host:port")
    if protocol != "grpc":
        raise HandshakeError(
            f"{plugin_path} offers protocol {protocol!r}; atom-go hosts speak only grpc "
            "(the binary is not atom-go's atom-plugin)"
        )
    cert: bytes | None = None
    if len(parts) >= 6 and len(parts[5]) >= _MIN_CERT_CHARS:
        cert = decode_cert(parts[5])
    multiplex: bool | None = None
    if len(parts) == 7:
        if parts[6] not in ("true", "false"):
            raise HandshakeError(f"handshake line {line!r}: multiplexing field {parts[6]!r} is not true or false")
        multiplex = parts[6] == "true"
    return Handshake(
        core_version=core,
        app_version=app,
        network=network,
        address=address,
        protocol=protocol,
        server_cert_der=cert,
        multiplex=multiplex,
    )
