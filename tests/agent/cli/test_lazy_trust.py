"""The trust store is read on a context's first TLS connection, not when aiohttp loads:
and the connection is verified against it as before.

Each case runs in a fresh interpreter with ``SSL_CERT_FILE`` naming a CA made here, so
"the default verify paths" are one known certificate and nothing depends on the
machine's own store.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

Key = ec.EllipticCurvePrivateKey


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _cert(subject: str, key: Key, issuer: str, signer: Key, *, ca: bool) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(signer, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_pki(folder: Path, ca_name: str) -> tuple[Path, Path, Path]:
    """A CA (its PEM) and a server certificate for 127.0.0.1 signed by it (PEM, key)."""
    ca_key, server_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    server = _cert("127.0.0.1", server_key, ca_name, ca_key, ca=False)
    paths = folder / f"{ca_name}.pem", folder / f"{ca_name}-server.pem", folder / "key.pem"
    paths[0].write_bytes(_pem(ca))
    paths[1].write_bytes(_pem(server))
    paths[2].write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


def run(code: str, cert_file: Path) -> str:
    env = {**os.environ, "SSL_CERT_FILE": str(cert_file), "SSL_CERT_DIR": str(cert_file.parent)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


COUNT = """
    import ssl
    from agent.cli.lazy_trust import read_trust_store_on_use
    read_trust_store_on_use()
    import aiohttp.connector as c
    read = ssl._ssl._SSLContext.cert_store_stats  # the store as it is, without loading it
    print(read(c._SSL_CONTEXT_VERIFIED)["x509_ca"], read(c._SSL_CONTEXT_UNVERIFIED)["x509_ca"])
    print(c._SSL_CONTEXT_VERIFIED.cert_store_stats()["x509_ca"])  # asked: read first
    print(len(ssl.create_default_context().get_ca_certs()))
"""


def test_aiohttp_loads_without_reading_the_store(tmp_path: Path) -> None:
    ca, _server, _key = make_pki(tmp_path, "test-ca")
    loaded, asked, listed = run(COUNT, ca).split("\n")[:3]
    assert loaded == "0 0"
    assert asked == "1" and listed == "1"  # the one CA in SSL_CERT_FILE


HANDSHAKE = """
    import asyncio, ssl, sys
    from agent.cli.lazy_trust import read_trust_store_on_use
    read_trust_store_on_use()
    import aiohttp
    from aiohttp import web

    async def main(cert, key):
        server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_tls.load_cert_chain(cert, key)
        app = web.Application()
        app.router.add_get("/", lambda request: web.Response(text="verified"))
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_tls)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            async with aiohttp.ClientSession() as session:  # aiohttp's default context
                async with session.get(f"https://127.0.0.1:{port}/") as answer:
                    print(await answer.text())
        except aiohttp.ClientConnectorCertificateError as exc:
            print("refused:", exc.certificate_error.verify_message)
        finally:
            await runner.cleanup()

    asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def test_a_connection_is_verified_against_the_store_read_on_use(tmp_path: Path) -> None:
    ca, server, key = make_pki(tmp_path, "trusted-ca")
    code = HANDSHAKE.replace("sys.argv[1], sys.argv[2]", f"{str(server)!r}, {str(key)!r}")
    assert run(code, ca).strip() == "verified"


def test_a_server_the_store_does_not_vouch_for_is_refused(tmp_path: Path) -> None:
    ca, _server, _key = make_pki(tmp_path, "trusted-ca")
    other = tmp_path / "other"
    other.mkdir()
    _other_ca, server, key = make_pki(other, "unknown-ca")
    code = HANDSHAKE.replace("sys.argv[1], sys.argv[2]", f"{str(server)!r}, {str(key)!r}")
    assert run(code, ca).strip().startswith("refused:")


def test_installing_twice_changes_nothing() -> None:
    code = """
        import ssl
        from agent.cli.lazy_trust import read_trust_store_on_use
        read_trust_store_on_use()
        wrap = ssl.SSLContext.wrap_bio
        read_trust_store_on_use()
        print(ssl.SSLContext.wrap_bio is wrap)
    """
    assert run(code, Path("/nonexistent/ca.pem")).strip() == "True"
