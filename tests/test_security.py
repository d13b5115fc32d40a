"""--web.config.file with real TLS clients (Python's ssl and curl), basic auth with bcrypt, and what never leaks."""

from __future__ import annotations

import base64
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import bcrypt
import pytest
import yaml

from exporter.config import ConfigError
from exporter.simulate.logs import API, log_line
from exporter.webconfig import load_web_config
from tests.conftest import free_port

START = log_line(API, "INFO", "api_server.py:1", "vLLM API server version 0.27.1", "08-16 12:00:00")


def openssl(*args: str, cwd) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
        cwd=d,
    )
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            f"/CN={name}",
            cwd=d,
        )
        openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.crt",
            "-days",
            "2",
            "-extfile",
            "san.cnf",
            cwd=d,
        )
    return d


def serve(tmp_path, web: dict):
    (tmp_path / "web.yaml").write_text(yaml.safe_dump(web))
    port = free_port()
    cfg = {
        "listen_address": f"127.0.0.1:{port}",
        "state_dir": str(tmp_path / "state"),
        "gpu": {"backend": "none"},
        "servers": [{"name": "s", "url": f"http://127.0.0.1:{free_port()}/metrics", "interval": "1s"}],
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter",
            "serve",
            "--config",
            str(tmp_path / "c.yaml"),
            "--web.config.file",
            str(tmp_path / "web.yaml"),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, port


def wait_port(port: int, proc) -> None:
    import socket

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read())
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError("exporter did not listen")


def until_lines_read(port: int) -> None:
    from exporter.exposition_parser import parse

    deadline = time.monotonic() + 60  # a hang guard
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            samples = parse(r.read().decode()).samples
        if any(s.name == "vllm_headroom_log_lines_read_total" and s.value > 0 for s in samples):
            return
        time.sleep(0.05)
    raise AssertionError("the log was not read")


def stop(proc) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    return err


def test_tls_with_client_certificates_and_basic_auth(tmp_path, pki):
    hashed = bcrypt.hashpw(b"s3cret-pass", bcrypt.gensalt(rounds=4)).decode().replace("$2b$", "$2y$", 1)
    proc, port = serve(
        tmp_path,
        {
            "tls_server_config": {
                "cert_file": str(pki / "server.crt"),
                "key_file": str(pki / "server.key"),
                "client_auth_type": "RequireAndVerifyClientCert",
                "client_ca_file": str(pki / "ca.crt"),
                "min_version": "TLS12",
            },
            "basic_auth_users": {"prometheus": hashed},
        },
    )
    try:
        wait_port(port, proc)
        url = f"https://127.0.0.1:{port}/metrics"
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.load_cert_chain(str(pki / "client.crt"), str(pki / "client.key"))
        token = base64.b64encode(b"prometheus:s3cret-pass").decode()
        req = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            assert r.status == 200 and b"vllm_headroom_target_up" in r.read()
        bad = urllib.request.Request(
            url, headers={"Authorization": "Basic " + base64.b64encode(b"prometheus:no").decode()}
        )
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(bad, context=ctx, timeout=10)
        assert err.value.code == 401
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(url, context=ctx, timeout=10)  # no credentials at all
        assert err.value.code == 401
        no_cert = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(req, context=no_cert, timeout=10).read()
        # curl, a second real TLS client
        r = subprocess.run(
            [
                "curl",
                "-sf",
                "--cacert",
                str(pki / "ca.crt"),
                "--cert",
                str(pki / "client.crt"),
                "--key",
                str(pki / "client.key"),
                "-u",
                "prometheus:s3cret-pass",
                url,
            ],
            capture_output=True,
            timeout=30,
        )
        assert r.returncode == 0 and b"vllm_headroom_build_info" in r.stdout
        r = subprocess.run(
            [
                "curl",
                "-s",
                "-o",
                "/dev/null",
                "--cacert",
                str(pki / "ca.crt"),
                "--cert",
                str(pki / "client.crt"),
                "--key",
                str(pki / "client.key"),
                "--tls-max",
                "1.1",
                url,
            ],
            capture_output=True,
            timeout=30,
        )
        assert r.returncode != 0  # below min_version: refused
        plain = subprocess.run(
            ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"http://127.0.0.1:{port}/"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert plain.stdout != "200"
    finally:
        err = stop(proc)
    assert "s3cret-pass" not in err and hashed not in err


@pytest.mark.parametrize("allowed, status", [(["not-this.example"], 403), (["localhost"], 200)])
def test_client_allowed_sans_is_enforced(tmp_path, pki, allowed, status):
    proc, port = serve(
        tmp_path,
        {
            "tls_server_config": {
                "cert_file": str(pki / "server.crt"),
                "key_file": str(pki / "server.key"),
                "client_auth_type": "RequireAndVerifyClientCert",
                "client_ca_file": str(pki / "ca.crt"),
                "client_allowed_sans": allowed,
            }
        },
    )
    try:
        wait_port(port, proc)
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.load_cert_chain(str(pki / "client.crt"), str(pki / "client.key"))  # SANs: 127.0.0.1, localhost
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ctx, timeout=30) as r:
                got = r.status
        except urllib.error.HTTPError as err:
            got = err.code
        assert got == status
    finally:
        stop(proc)


def test_bad_web_config_is_refused_without_echoing_secrets(tmp_path):
    path = tmp_path / "web.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "basic_auth_users": {"alice": "plaintext-password!"},
                "tls_server_config": {"cert_file": "/nope.crt", "client_auth_type": "Maybe"},
                "tls": {},
            }
        )
    )
    with pytest.raises(ConfigError) as err:
        load_web_config(str(path))
    text = str(err.value)
    assert "plaintext-password!" not in text
    assert "basic_auth_users.alice: expected a bcrypt hash" in text
    assert "tls_server_config.key_file: missing" in text and "client_auth_type: expected one of" in text
    assert "tls: unknown key" in text
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "exporter",
            "serve",
            "--web.config.file",
            str(path),
            "--web.listen-address",
            f"127.0.0.1:{free_port()}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2 and "plaintext-password!" not in r.stderr + r.stdout


def test_sigterm_flushes_state_and_exits_cleanly(tmp_path):
    log = tmp_path / "v.log"
    oom = log_line("EngineCore_DP0 pid=2", "ERROR", "core.py:1", "torch.OutOfMemoryError: CUDA out of memory.")
    log.write_text(START + "\n" + oom + "\n")
    port = free_port()
    cfg = {
        "listen_address": f"127.0.0.1:{port}",
        "state_dir": str(tmp_path / "state"),
        "gpu": {"backend": "none"},
        "servers": [{"name": "s", "url": f"http://127.0.0.1:{free_port()}/metrics", "log": str(log)}],
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "serve", "--config", str(tmp_path / "c.yaml")],
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_port(port, proc)
    until_lines_read(port)  # the log is read; SIGTERM must then leave the state at its end
    err = stop(proc)
    assert proc.returncode == 0, err
    assert "watching s:" in err and "stopped; log offsets saved" in err  # the startup report and the goodbye
    state = yaml.safe_load((tmp_path / "state" / "s.tail.json").read_text())
    assert state["offset"] == os.path.getsize(log) and state["analyzer"]["counts"]["oom"] == 1


def test_a_forged_line_in_one_log_cannot_count_for_another_server(tmp_path):
    """Two servers through the real collector: text in a's log that names b neither counts for b nor becomes a
    label value; a's own OOM is counted exactly once."""
    from exporter.config import parse_config
    from exporter.daemon import Daemon
    from exporter.exposition_parser import parse
    from exporter.exposition_writer import text_format

    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(
        '(APIServer pid=1) INFO:     server="b" (EngineCore_DP0 pid=2) ERROR 08-16 12:01:00 [core.py:1] '
        "torch.OutOfMemoryError: CUDA out of memory\n" + "\x1b[31m\x00\x07" * 1000 + "\n"
        "(EngineCore_DP0 pid=2) ERROR 08-16 12:01:00 [core.py:1] torch.OutOfMemoryError: CUDA out of memory\n"
    )
    b.write_text(START + "\n")
    cfg = parse_config(
        {
            "state_dir": str(tmp_path / "state"),
            "gpu": {"backend": "none"},
            "servers": [
                {"name": "a", "url": "http://127.0.0.1:9/metrics", "log": str(a)},
                {"name": "b", "url": "http://127.0.0.1:9/metrics", "log": str(b)},
            ],
        }
    )
    daemon = Daemon(cfg)
    for s in daemon.servers.values():
        assert s.tailer is not None
        s.tailer.poll()
        s.tailer.poll()  # the log has gone quiet: a failure still undecided is settled now
    samples = parse(text_format(daemon.registry).decode()).samples
    ooms: dict[str, float] = {}
    for s in samples:
        if s.name == "vllm_headroom_oom_events_total":
            ooms[s.label("server")] = ooms.get(s.label("server"), 0) + s.value
    assert ooms.get("a") == 1 and not ooms.get("b")
    assert {s.label("server") for s in samples if s.label("server")} == {"a", "b"}
    assert not any("OutOfMemory" in v or "\x1b" in v for s in samples for _k, v in s.labels)


def test_credentials_in_a_target_url_never_reach_the_landing_page_or_the_log(tmp_path):
    port = free_port()
    url = f"http://scraper:pa55w0rd@127.0.0.1:{free_port()}/metrics"  # nothing answers: the failure is logged
    cfg = {
        "listen_address": f"127.0.0.1:{port}",
        "state_dir": str(tmp_path / "state"),
        "gpu": {"backend": "none"},
        "servers": [{"name": "s", "url": url, "interval": "1s"}],
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "--log-level", "DEBUG", "serve", "--config", str(tmp_path / "c.yaml")],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_port(port, proc)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as r:
            page = r.read().decode()
        deadline = time.monotonic() + 60  # a hang guard
        while time.monotonic() < deadline:  # until the first scrape has happened, and been logged
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=30):
                    break
            except urllib.error.HTTPError:
                time.sleep(0.05)
    finally:
        err = stop(proc)
    assert "127.0.0.1" in page and "pa55w0rd" not in page and "scraper" not in page
    assert "watching s: http://***@127.0.0.1" in err and "not answering yet" in err
    assert "pa55w0rd" not in err
