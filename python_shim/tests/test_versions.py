"""The Python constants agree with bridge/version.go, the Go side of the contract."""

from __future__ import annotations

import re

from conftest import REPO

from atom_go import versions


def _go_const(name: str) -> str:
    text = (REPO / "bridge" / "version.go").read_text()
    m = re.search(rf"\b{name}\s*=\s*(\S+)", text)
    assert m, f"{name} not found in bridge/version.go"
    return m.group(1).strip('"')


def test_versions_match_bridge() -> None:
    assert int(_go_const("ProtocolVersion")) == versions.PROTOCOL_VERSION
    assert int(_go_const("WireVersion")) == versions.WIRE_VERSION
    assert _go_const("MagicCookieKey") == versions.MAGIC_COOKIE_KEY
    assert _go_const("MagicCookieValue") == versions.MAGIC_COOKIE_VALUE
