"""The embedded bus speaks TLS, so a service's password reaches the real nats-server only.

nats-server listens on a TCP port of 127.0.0.1 (it cannot listen on a Unix socket). While it
restarts, the port is free, and any local process, a task among them, may bind it: a plain
client reconnecting there would send its CONNECT, user and password, to whoever listens. So
`pai up` makes a private certificate authority and a server certificate for 127.0.0.1 and
localhost in the data dir (``tls/``, every file 0600), runs the server with them, and every
client verifies the server against that authority before it says anything: the TLS handshake
comes first (``handshake_first`` on both sides; nats-py would otherwise upgrade only when the
server's plain-text INFO asks for it, which a fake server would not), so a fake server sees a
ClientHello and nothing else. The authority's key is not kept: it signs the one server
certificate at creation and is thrown away, so no file in the data dir can sign another; when
the certificate nears its end (or the files are damaged) both are made anew.

Where the bus runs elsewhere (Kubernetes, docker-compose) no authority is named (``PAI_NATS_CA``
unset) and clients connect as before.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from libs.backbone.busauth import write_private

TLS_DIR = "tls"
CA_FILE = "nats-ca.pem"
CERT_FILE = "nats-server.pem"
KEY_FILE = "nats-server.key"
HOSTS = ("127.0.0.1", "localhost")
VALID_FOR = datetime.timedelta(days=3650)
# Made anew at a start this close to the certificate's end.
RENEW_BEFORE = datetime.timedelta(days=30)


@dataclass(frozen=True)
class BusTls:
    """The files of the bus's TLS: the authority clients trust, the server's certificate and key."""

    ca: Path
    cert: Path
    key: Path

    def server_config(self) -> str:
        """The nats-server configuration block: TLS with this certificate, the handshake first."""
        block = {"cert_file": str(self.cert), "key_file": str(self.key), "handshake_first": True}
        return "tls: " + json.dumps(block, indent=2) + "\n"


def client_context(ca: Path) -> ssl.SSLContext:
    """A TLS client context trusting ``ca`` only (not the system's authorities), names checked."""
    return ssl.create_default_context(cafile=str(ca))


def client_options(ca: Path | None) -> dict[str, Any]:
    """nats-py ``connect`` options for a bus verified against ``ca``; none without one.

    The handshake comes first: the client verifies the server before reading anything from it.
    """
    if ca is None:
        return {}
    return {"tls": client_context(ca), "tls_handshake_first": True}


def ensure_bus_tls(
    directory: Path, hosts: tuple[str, ...] = HOSTS, *, now: datetime.datetime | None = None
) -> BusTls:
    """The bus's TLS files in ``directory``: those there when usable, else a new authority and
    server certificate for ``hosts`` (each file 0600, the directory 0700)."""
    now = now or datetime.datetime.now(datetime.UTC)
    tls = BusTls(directory / CA_FILE, directory / CERT_FILE, directory / KEY_FILE)
    if not _usable(tls, hosts, now):
        _make(tls, hosts, now)
    for path in (tls.ca, tls.cert, tls.key):
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o600)
    return tls


def _usable(tls: BusTls, hosts: tuple[str, ...], now: datetime.datetime) -> bool:
    try:
        ca = x509.load_pem_x509_certificate(tls.ca.read_bytes())
        cert = x509.load_pem_x509_certificate(tls.cert.read_bytes())
        key = serialization.load_pem_private_key(tls.key.read_bytes(), password=None)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return False
    der, info = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(der, info) != cert.public_key().public_bytes(der, info):
        return False
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    covered = {str(ip) for ip in names.get_values_for_type(x509.IPAddress)} | set(
        names.get_values_for_type(x509.DNSName)
    )
    return (
        set(hosts) <= covered
        and cert.not_valid_before_utc <= now
        and now + RENEW_BEFORE < min(cert.not_valid_after_utc, ca.not_valid_after_utc)
    )


def _subject_names(hosts: tuple[str, ...]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _make(tls: BusTls, hosts: tuple[str, ...], now: datetime.datetime) -> None:
    start, end = now - datetime.timedelta(minutes=5), now + VALID_FOR
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pai embedded bus authority")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pai embedded bus")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(_subject_names(hosts)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    # Each file is replaced whole; a start that finds them not matching (a crash between two)
    # makes them all anew.
    tls.key.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(tls.key.parent, 0o700)
    pem = serialization.Encoding.PEM
    write_private(
        tls.key,
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode(),
    )
    write_private(tls.cert, cert.public_bytes(pem).decode())
    write_private(tls.ca, ca.public_bytes(pem).decode())
