"""The command line as a user runs it: exit codes, stdin, JSON lines, unreadable input."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import fixture_text


def run(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "exporter", *args], input=stdin, capture_output=True, timeout=60)


def test_triage_exit_codes_and_json(tmp_path):
    healthy = tmp_path / "healthy.log"
    healthy.write_text(fixture_text("healthy_v1_tp8.log"))
    oom = tmp_path / "oom.log"
    oom.write_text(fixture_text("oom_weight_loading_tp8.log"))
    r = run("triage", str(healthy))
    assert r.returncode == 0 and b"First memory failure: none" in r.stdout
    r = run("triage", "--json", str(healthy), str(oom))
    assert r.returncode == 1
    reports = [json.loads(line) for line in r.stdout.decode().splitlines()]
    assert [rep["file"] for rep in reports] == [str(healthy), str(oom)]
    assert reports[1]["first_oom"]["stage"] == "weight_loading"


def test_triage_reads_stdin():
    r = run("triage", "-", stdin=fixture_text("oom_runtime_prefill.log").encode())
    assert r.returncode == 1
    assert b"stage: prefill" in r.stdout and b"engine ready before it: yes" in r.stdout


def test_unreadable_input_exits_2_with_a_clear_message(tmp_path):
    good = tmp_path / "ok.log"
    good.write_text(fixture_text("healthy_v1_tp8.log"))
    r = run("triage", "--json", str(tmp_path / "missing.log"), str(good), str(tmp_path))
    assert r.returncode == 2
    err = r.stderr.decode()
    assert "missing.log: cannot read this log: No such file or directory" in err
    assert "Is a directory" in err
    assert len(r.stdout.decode().splitlines()) == 1  # the readable file is still reported


def test_json_stays_clean_of_log_output(tmp_path):
    log = tmp_path / "x.log"
    log.write_text(fixture_text("oom_graph_capture.log"))
    r = run("--log-level", "DEBUG", "triage", "--json", str(log))
    json.loads(r.stdout)  # nothing but the JSON object on stdout


def test_check_config(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("servers:\n  - {name: a, url: 'http://127.0.0.1:8000/metrics'}\n")
    r = run("check-config", str(good))
    assert r.returncode == 0 and b"OK: 1 server(s)" in r.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("servers:\n  - {name: a, urll: x}\n")
    r = run("check-config", str(bad))
    assert r.returncode == 2
    assert b"bad.yaml: servers[0].urll: unknown key (did you mean 'url'?)" in r.stderr
