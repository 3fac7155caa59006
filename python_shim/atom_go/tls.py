"""AutoMTLS: the host's side of go-plugin's mutual TLS.

The host makes a throw-away self-signed certificate (as go-plugin's Go client does: ECDSA
P-521, CN and DNS name ``localhost``, client and server auth, valid as its own CA), hands its
PEM to the plugin in ``PLUGIN_CLIENT_CERT``, and trusts exactly the certificate the plugin
sends back on its handshake line.
"""

from __future__ import annotations

import dataclasses
import datetime
import secrets

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# The name both of go-plugin's certificates carry; the channel overrides the target name with it.
TLS_SERVER_NAME = "localhost"


@dataclasses.dataclass(frozen=True)
class ClientCertificate:
    """A PEM certificate and its PEM private key."""

    cert_pem: bytes
    key_pem: bytes


def generate_client_certificate() -> ClientCertificate:
    """Makes the host's certificate for one plugin process."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, TLS_SERVER_NAME),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "atom-go"),
        ]
    )
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(int.from_bytes(secrets.token_bytes(16), "big") >> 1 or 1)
        .not_valid_before(now - datetime.timedelta(seconds=30))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(TLS_SERVER_NAME)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    return ClientCertificate(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ),
    )
