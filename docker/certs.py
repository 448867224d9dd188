#!/usr/bin/env python3
"""Make a private CA and a SuperLink server certificate for TLS (development and tests).

    python docker/certs.py docker/certs                     # SANs: superlink, localhost, 127.0.0.1
    python docker/certs.py DIR --host my.server.org --host 10.0.0.5
    python docker/certs.py DIR --supernode-keys 3           # also SuperNode authentication key pairs

Writes ``ca.crt`` (give it to SuperNodes, ``--root-certificates``, and to the ``flwr`` CLI,
``root-certificates`` in its config.toml), ``ca.key`` (keep it offline), ``server.pem`` and
``server.key`` (the SuperLink's ``--ssl-certfile`` / ``--ssl-keyfile``).  The tests in
``tests/deployment`` make their certificates with this module.  For production use a CA you
already trust; these keys are ECDSA P-256, certificates valid for ``days`` days.

``--supernode-keys N`` also writes ``supernode-K`` / ``supernode-K.pub`` (ECDSA P-384, OpenSSH
format, as ``ssh-keygen -t ecdsa -b 384``) for SuperNode authentication: each SuperNode starts
with its private key (``--auth-supernode-private-key``) and the operator registers the public
key with ``flwr supernode register supernode-K.pub <connection>`` (docker/SECURITY.md).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import sys
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_HOSTS = ("superlink", "localhost", "127.0.0.1")


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def generate(out: str | Path, hosts: Sequence[str] = DEFAULT_HOSTS, days: int = 30) -> dict[str, Path]:
    """Write ca.crt, ca.key, server.pem, server.key into ``out``; return their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    until = now + dt.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sstq-fl development CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(until)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(until)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = {"ca": out / "ca.crt", "ca_key": out / "ca.key", "cert": out / "server.pem", "key": out / "server.key"}
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    for name, k in (("ca_key", ca_key), ("key", key)):
        paths[name].write_bytes(_key_pem(k))
        paths[name].chmod(0o600)
    return paths


def supernode_keys(out: str | Path, n: int) -> list[tuple[Path, Path]]:
    """Write ``n`` SuperNode key pairs ``supernode-K`` (private) / ``supernode-K.pub`` into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    pairs = []
    for k in range(n):
        key = ec.generate_private_key(ec.SECP384R1())
        priv, pub = out / f"supernode-{k}", out / f"supernode-{k}.pub"
        priv.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                           serialization.NoEncryption()))
        priv.chmod(0o600)
        pub.write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
                        + f" supernode-{k}\n".encode())
        pairs.append((priv, pub))
    return pairs


def main(argv: Sequence[str]) -> None:
    if not argv or argv[0].startswith("-"):
        raise SystemExit(__doc__)
    hosts = [argv[i + 1] for i, a in enumerate(argv) if a == "--host"] or list(DEFAULT_HOSTS)
    for name, p in generate(argv[0], hosts).items():
        print(f"{name:7s} {p}")
    if "--supernode-keys" in argv:
        for priv, pub in supernode_keys(argv[0], int(argv[argv.index("--supernode-keys") + 1])):
            print(f"key     {priv}  (register {pub})")


if __name__ == "__main__":
    main(sys.argv[1:])
