"""A self-signed serving pair for when no certificate is configured, as kube-scheduler's --cert-dir: a CA made
for the purpose and a certificate it signs for this host's names, written to a directory (the configured
`certDir`, reused on the next start when the files are there; else a private temporary directory).

Clients verify with `ca.crt` from that directory (`metrics-sched explain --ca-file`): TLS is always verified."""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CERT_NAME, KEY_NAME, CA_NAME = "metrics-sched.crt", "metrics-sched.key", "ca.crt"
VALIDITY = datetime.timedelta(days=365)  # upstream's self-signed pair: one year


@dataclass(frozen=True)
class GeneratedPair:
    cert_file: Path  # the serving certificate followed by its CA
    key_file: Path
    ca_file: Path


def host_names(bind_address: str) -> list[str]:
    """localhost and this host's name, the loopback addresses, and the bind address unless a wildcard."""
    names = ["localhost", socket.gethostname(), "127.0.0.1", "::1"]
    if bind_address not in ("0.0.0.0", "::", ""):
        names.append(bind_address)
    return list(dict.fromkeys(names))


def _san(names: Iterable[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def generate(directory: Path | None, names: list[str]) -> GeneratedPair:
    """The pair in `directory` when both files are there already, else a new one written there (or into a new
    private temporary directory when `directory` is None)."""
    if directory is not None:
        pair = GeneratedPair(directory / CERT_NAME, directory / KEY_NAME, directory / CA_NAME)
        if pair.cert_file.exists() and pair.key_file.exists():
            return pair
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    else:
        directory = Path(tempfile.mkdtemp(prefix="metrics-sched-serving-"))
        pair = GeneratedPair(directory / CERT_NAME, directory / KEY_NAME, directory / CA_NAME)
    now = datetime.datetime.now(datetime.UTC)
    host = socket.gethostname()
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}-ca@{int(now.timestamp())}")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + VALIDITY)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}@{int(now.timestamp())}")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=True, content_commitment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .add_extension(_san(names), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    _write_private(pair.key_file, key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))
    _write_private(pair.cert_file, cert.public_bytes(pem) + ca.public_bytes(pem))
    _write_private(pair.ca_file, ca.public_bytes(pem))
    return pair
