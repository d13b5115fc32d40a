"""Config: a good file loads; every problem names the file, the key path and what was expected."""

from __future__ import annotations

import pytest

from exporter.config import ConfigError, load_config, parse_config

GOOD = """
listen_address: "127.0.0.1:9478"
servers:
  - name: prefill-0
    url: http://10.0.0.1:8000/metrics
    interval: 5s
    timeout: 2s
    log: {path: /var/log/vllm/prefill-0.log, format: cri}
  - name: decode-0
    url: https://10.0.0.2:8000/metrics
    log: /var/log/vllm/decode-0.log
gpu: {backend: fake, sample_interval: 100ms, fake_count: 8}
windows: {prefix_cache_hit_ratio: 10m}
environment: {min_driver_version: "580.65", gpu_models: [GB300], min_gpu_count: 8}
"""


def write(tmp_path, text):
    path = tmp_path / "headroom.yaml"
    path.write_text(text)
    return str(path)


def problems(tmp_path, text):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    return err.value.problems


def test_good_config_loads(tmp_path):
    cfg = load_config(write(tmp_path, GOOD))
    assert cfg.listen_address == "127.0.0.1:9478"
    assert [s.name for s in cfg.servers] == ["prefill-0", "decode-0"]
    assert cfg.servers[0].interval_s == 5.0 and cfg.servers[0].timeout_s == 2.0
    assert cfg.servers[0].log.format == "cri" and cfg.servers[1].log.path == "/var/log/vllm/decode-0.log"
    assert cfg.gpu.backend == "fake" and cfg.gpu.sample_interval_s == pytest.approx(0.1)
    assert cfg.prefix_cache_window_s == 600
    assert cfg.environment.min_driver_version == "580.65" and cfg.environment.gpu_models == ("GB300",)


def test_empty_file_gives_defaults(tmp_path):
    cfg = load_config(write(tmp_path, ""))
    assert cfg.servers[0].url == "http://127.0.0.1:8000/metrics" and cfg.listen_address == "0.0.0.0:9478"


def test_unknown_key_is_an_error_with_a_suggestion(tmp_path):
    got = problems(tmp_path, "servers:\n  - name: a\n    intervall: 5s\n")
    assert len(got) == 1
    assert got[0].endswith("headroom.yaml: servers[0].intervall: unknown key (did you mean 'interval'?)")


def test_every_problem_is_reported_at_once(tmp_path):
    got = problems(
        tmp_path,
        """
listen_address: nowhere
servers:
  - name: a
    url: ftp://x/metrics
    interval: soon
  - url: http://x:8000/metrics
  - name: a
gpu: {backend: cuda}
""",
    )
    text = "\n".join(got)
    assert "listen_address: expected host:port" in text
    assert "servers[0].url: expected an http:// or https:// URL" in text and "'ftp://x/metrics'" in text
    assert "servers[0].interval: expected a duration such as 5s" in text
    assert "servers[1].name: missing" in text
    assert "servers[2].name: duplicate server name 'a'" in text
    assert "gpu.backend: expected one of auto, nvml, amdsmi, fake, none, got 'cuda'" in text
    assert all(p.startswith(str(tmp_path)) for p in got)


def test_timeout_longer_than_interval(tmp_path):
    got = problems(tmp_path, "servers:\n  - {name: a, interval: 1s, timeout: 5s}\n")
    assert "servers[0].timeout: expected at most the interval (1s), got 5s" in got[0]


def test_invalid_yaml_names_line(tmp_path):
    got = problems(tmp_path, "servers:\n  - name: [unclosed\n")
    assert "invalid YAML" in got[0] and "line " in got[0]


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(str(tmp_path / "nope.yaml"))
    assert "nope.yaml: cannot read the config file" in str(err.value)


def test_secret_looking_values_are_not_echoed():
    with pytest.raises(ConfigError) as err:
        parse_config({"servers": [{"name": "a", "auth_token": "hunter2"}]}, "c.yaml")
    assert "hunter2" not in str(err.value)


def test_top_level_must_be_a_mapping():
    with pytest.raises(ConfigError) as err:
        parse_config(["servers"], "c.yaml")
    assert "c.yaml: <top>: expected a mapping" in str(err.value)


def test_shipped_example_config_is_valid():
    from pathlib import Path

    cfg = load_config(str(Path(__file__).parent.parent / "deploy" / "headroom.example.yaml"))
    assert [s.name for s in cfg.servers] == ["prefill-0", "decode-0"] and cfg.gpu.backend == "auto"


@pytest.mark.parametrize(
    "text, where",
    [
        ("servers:\n  - name: a\n    interval: .nan\n", "servers[0].interval"),
        ("servers:\n  - name: a\n    interval: .inf\n", "servers[0].interval"),
        ("state_save_interval: " + "9" * 401 + "\n", "state_save_interval"),
        ("servers:\n  - name: a\n    max_response_bytes: " + "9" * 401 + "\n", "servers[0].max_response_bytes"),
        ("gpu: {fake_count: " + "9" * 401 + "}\n", "gpu.fake_count"),
    ],
)
def test_values_no_scrape_loop_can_live_with_are_refused(tmp_path, text, where):
    got = problems(tmp_path, text)
    assert len(got) == 1 and f": {where}: expected" in got[0], got


def test_deep_nesting_invalid_utf8_and_duplicate_keys_are_clear_errors(tmp_path):
    assert problems(tmp_path, "servers: " + "[" * 100_000 + "]" * 100_000 + "\n")[0].endswith("nested too deeply")
    path = tmp_path / "headroom.yaml"
    path.write_bytes(b"state_dir: /tmp/\xff\xfe\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(path))
    assert "not a UTF-8 text file" in err.value.problems[0]
    got = problems(tmp_path, "servers:\n  - name: a\n    interval: 5s\n    interval: 1s\n")
    assert "line 4" in got[0] and "duplicate key 'interval'" in got[0]


def test_a_yaml_alias_bomb_is_reported_without_expanding_it(tmp_path):
    import resource

    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):  # 10^9 leaves when expanded; a few hundred bytes as written
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    lines.append("servers:\n  - name: s\n    interval: *a8")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    got = problems(tmp_path, "\n".join(lines) + "\n")
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert any("servers[0].interval: expected a duration" in p for p in got)
    assert any(": a0: unknown key" in p for p in got)
    assert all(len(p) < 400 for p in got)
    assert grown_mb < 200, f"the error message expanded the aliases ({grown_mb:.0f} MB)"


def test_check_config_validates_the_referenced_web_config(tmp_path):
    import subprocess
    import sys

    (tmp_path / "web.yaml").write_text("basic_auth_users: {alice: not-a-hash}\n")
    path = write(tmp_path, f"web_config_file: {tmp_path / 'web.yaml'}\n")
    r = subprocess.run(
        [sys.executable, "-m", "exporter", "check-config", path], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2 and "basic_auth_users.alice: expected a bcrypt hash" in r.stderr
    assert "Traceback" not in r.stderr


def test_credentials_in_a_target_url_are_redacted():
    from exporter.config import redact_text, redact_url

    url = "http://scraper:pa55w0rd@10.0.0.1:8000/metrics"
    assert redact_url(url) == "http://***@10.0.0.1:8000/metrics"
    assert redact_url("http://10.0.0.1:8000/metrics") == "http://10.0.0.1:8000/metrics"
    assert "pa55w0rd" not in redact_text("cannot connect to scraper:pa55w0rd@10.0.0.1", url)
