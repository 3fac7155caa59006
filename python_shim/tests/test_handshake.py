"""The handshake parser: good lines, bad versions, missing fields, certificates."""

from __future__ import annotations

import base64

import pytest

from atom_go.handshake import HandshakeError, decode_cert, der_to_pem, parse_handshake
from atom_go.tls import generate_client_certificate


def _cert_field() -> tuple[str, bytes]:
    pem = generate_client_certificate().cert_pem
    der = base64.b64decode(b"".join(line for line in pem.splitlines() if not line.startswith(b"-----")))
    return base64.b64encode(der).decode().rstrip("="), der


def test_plain_unix_line() -> None:
    hs = parse_handshake("1|1|unix|/tmp/atomgo-x/plugin123|grpc|\n")
    assert (hs.core_version, hs.app_version, hs.network, hs.protocol) == (1, 1, "unix", "grpc")
    assert hs.address == "/tmp/atomgo-x/plugin123"
    assert hs.grpc_target == "unix:/tmp/atomgo-x/plugin123"
    assert hs.server_cert_der is None
    assert hs.server_cert_pem() is None
    assert hs.multiplex is None


def test_bytes_line_and_five_fields() -> None:
    hs = parse_handshake(b"1|1|unix|/s/p|grpc")
    assert hs.address == "/s/p"
    assert hs.server_cert_der is None


def test_tcp_line() -> None:
    hs = parse_handshake("1|1|tcp|127.0.0.1:1234|grpc|")
    assert hs.grpc_target == "127.0.0.1:1234"


def test_multiplex_field() -> None:
    assert parse_handshake("1|1|unix|/s/p|grpc||true").multiplex is True
    assert parse_handshake("1|1|unix|/s/p|grpc||false").multiplex is False
    with pytest.raises(HandshakeError, match="multiplexing"):
        parse_handshake("1|1|unix|/s/p|grpc||maybe")


def test_certificate_unpadded_and_padded() -> None:
    field, der = _cert_field()
    hs = parse_handshake(f"1|1|unix|/s/p|grpc|{field}")
    assert hs.server_cert_der == der
    pem = hs.server_cert_pem()
    assert pem is not None
    assert pem.startswith(b"-----BEGIN CERTIFICATE-----\n")
    assert pem == der_to_pem(der)
    padded = field + "=" * (-len(field) % 4)
    assert parse_handshake(f"1|1|unix|/s/p|grpc|{padded}").server_cert_der == der


def test_short_cert_field_is_ignored_like_go() -> None:
    # go-plugin's client treats a CERT field of 50 characters or fewer as no certificate.
    assert parse_handshake("1|1|unix|/s/p|grpc|" + "A" * 50).server_cert_der is None


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("!" * 80, "not base64"),
        (base64.b64encode(b"\x30" + b"\x00" * 80).decode(), "not a valid DER X.509"),
    ],
)
def test_bad_certificates(field: str, message: str) -> None:
    with pytest.raises(HandshakeError, match=message):
        parse_handshake(f"1|1|unix|/s/p|grpc|{field}")


def test_decode_cert_rejects_garbage() -> None:
    with pytest.raises(HandshakeError):
        decode_cert("@@@@")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("", "empty line"),
        ("\n", "empty line"),
        ("This binary is a plugin. These are not meant to be executed directly.", "not atom-go's atom-plugin"),
        ("1|1|unix", "fields are missing"),
        ("1|1|unix|/s/p", "fields are missing"),
        ("1|1|unix|/s/p|grpc|x|true|extra", "at most 7"),
        ("x|1|unix|/s/p|grpc|", "core protocol version 'x' is not an integer"),
        ("1|y|unix|/s/p|grpc|", "app protocol version 'y' is not an integer"),
        ("-1|1|unix|/s/p|grpc|", "negative"),
        ("1|1|udp|/s/p|grpc|", "neither unix nor tcp"),
        ("1|1|unix||grpc|", "address is empty"),
        ("1|1|unix|relative/sock|grpc|", "not absolute"),
        ("1|1|tcp|localhost|grpc|", "not host:port"),
        ("1|1|tcp|localhost:99999|grpc|", "not host:port"),
        ("1|1|unix|/s/p|netrpc|", "only grpc"),
    ],
)
def test_malformed_lines(line: str, message: str) -> None:
    with pytest.raises(HandshakeError, match=message):
        parse_handshake(line)


def test_non_utf8() -> None:
    with pytest.raises(HandshakeError, match="not UTF-8"):
        parse_handshake(b"\xff\xfe|1|unix")


def test_overlong_line() -> None:
    with pytest.raises(HandshakeError, match="more than"):
        parse_handshake(b"1|1|unix|/s/p|grpc|" + b"A" * 70000)


def test_wrong_core_version_says_what_to_do() -> None:
    with pytest.raises(HandshakeError) as err:
        parse_handshake("2|1|unix|/s/p|grpc|", plugin_path="/opt/atom-plugin")
    msg = str(err.value)
    assert "/opt/atom-plugin speaks go-plugin core protocol 2" in msg
    assert "same atom-go release" in msg


def test_wrong_app_version_says_what_to_do() -> None:
    with pytest.raises(HandshakeError) as err:
        parse_handshake("1|7|unix|/s/p|grpc|")
    msg = str(err.value)
    assert "protocol version 7" in msg
    assert "speaks 1" in msg
    assert "make python-plugin" in msg
    assert "ATOM_GO_PLUGIN" in msg


def test_accepted_versions_list() -> None:
    assert parse_handshake("1|3|unix|/s/p|grpc|", accepted_app_versions=(1, 3)).app_version == 3
    with pytest.raises(HandshakeError, match="speaks 1, 3"):
        parse_handshake("1|2|unix|/s/p|grpc|", accepted_app_versions=(3, 1))
