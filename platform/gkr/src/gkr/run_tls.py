"""A run's TLS identity, minted by gkr at submit: who may join the run's Lighthouse (trainer/distributed/mtls.py).

Each run gets its own CA. gkr signs two certificates with it, the Lighthouse's (server, for
contract.names.LIGHTHOUSE_TLS_NAME) and the members' (client, and server of their heal transfers for
contract.names.MEMBER_TLS_NAME: trainer/ft/heal_tls.py and the groups' ring between regions,
trainer/distributed/tls_ring.py), and then drops the CA's key: it is never written anywhere, so nobody, the submitter included, can mint another certificate for the
run. The certificates and their keys go into Secrets in the run's namespace of each region's
cluster (the Lighthouse's in the home cluster only); another team's pods cannot read them (RBAC:
Secrets are namespaced), and a certificate of another run's CA is refused at the handshake.
A dry run renders the Secrets with PLACEHOLDER data: keys are minted only when the run is applied.
"""

from __future__ import annotations

import base64
import datetime
from dataclasses import dataclass
from typing import Any

from contract import names

PLACEHOLDER = "<minted by gkr at submit>"
VALID_DAYS = 90  # a run longer than this needs a new identity (resubmit): the handshake refuses expired certificates
SECRET_TYPE = "kubernetes.io/tls"  # tls.crt, tls.key; plus ca.crt (the names cert-manager uses)


@dataclass(frozen=True)
class Identity:
    """PEM: the run's CA certificate, the Lighthouse's certificate and key, the members' certificate and key."""

    ca: str
    lighthouse: tuple[str, str]
    member: tuple[str, str]


def mint(run: str, now: datetime.datetime | None = None) -> Identity:
    """A fresh CA for ``run`` and its two certificates; the CA's key is forgotten on return."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID as Usage
    from cryptography.x509.oid import NameOID

    start = (now or datetime.datetime.now(datetime.UTC)) - datetime.timedelta(minutes=5)  # clock skew
    end = start + datetime.timedelta(days=VALID_DAYS)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common[:64])])

    def pem(key: ec.EllipticCurvePrivateKey) -> str:
        raw = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return raw.decode()

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name(f"meridian run {run}")
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
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # keyCertSign, cRLSign only
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(common: str, usage: list[x509.ObjectIdentifier], dns: str) -> tuple[str, str]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(common))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(dns)]), critical=False)
        )
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM).decode(), pem(key)

    return Identity(
        ca=ca.public_bytes(serialization.Encoding.PEM).decode(),
        lighthouse=leaf(f"{run} lighthouse", [Usage.SERVER_AUTH], names.LIGHTHOUSE_TLS_NAME),
        # A member is a client (of the Lighthouse, of a peer's heal server and ring) and serves its heal transfers and ring.
        member=leaf(f"{run} member", [Usage.CLIENT_AUTH, Usage.SERVER_AUTH], names.MEMBER_TLS_NAME),
    )


def secret_name(run: str, role: str) -> str:
    return f"{run}-{role}-tls"


def secret(run: str, role: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """The Secret of ``role`` ("lighthouse" or "member"), its data PLACEHOLDER until ``filled``."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": secret_name(run, role), "namespace": namespace, "labels": dict(labels)},
        "type": SECRET_TYPE,
        "stringData": {"ca.crt": PLACEHOLDER, "tls.crt": PLACEHOLDER, "tls.key": PLACEHOLDER},
    }


def filled(obj: dict[str, Any], identity: Identity, role: str) -> dict[str, Any]:
    """The Secret with the run's identity in it (base64 ``data``, as the API stores it)."""
    cert, key = identity.lighthouse if role == "lighthouse" else identity.member
    values = {"ca.crt": identity.ca, "tls.crt": cert, "tls.key": key}
    out = {k: v for k, v in obj.items() if k != "stringData"}
    out["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}
    return out


def volume(run: str, role: str) -> dict[str, Any]:
    """The pod volume of the role's Secret, readable by the pod's user whatever the image's (no other pod sees it)."""
    return {
        "name": "run-tls",
        "secret": {"secretName": secret_name(run, role), "defaultMode": 0o444},
    }  # inside the pod only


MOUNT = {"name": "run-tls", "mountPath": names.RUN_TLS_DIR, "readOnly": True}
