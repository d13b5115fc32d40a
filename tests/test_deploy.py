"""deploy/: every manifest parses, points at files that exist, and carries exactly the generated rules."""

from __future__ import annotations

import configparser
import subprocess
from pathlib import Path

import pytest
import yaml

from exporter.config import load_config, parse_config
from exporter.generate import recording, rules, weekly
from exporter.generate.alerts import alert_specs
from exporter.generate.thresholds import Thresholds
from tests.conftest import ROOT, need

DEPLOY = ROOT / "deploy"


def docs(path: Path) -> list:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


@pytest.mark.parametrize("path", sorted(p.relative_to(DEPLOY) for p in DEPLOY.rglob("*.y*ml")), ids=str)
def test_every_yaml_manifest_parses(path):
    assert docs(DEPLOY / path)


def test_kubernetes_objects_are_complete():
    kinds = {}
    for path in (DEPLOY / "kubernetes").glob("*.yaml"):
        for d in docs(path):
            assert d["apiVersion"] and d["kind"] and d["metadata"]["name"] == "vllm-headroom", path
            kinds[d["kind"]] = d
    assert {"DaemonSet", "Service", "ServiceMonitor", "PrometheusRule", "ConfigMap"} <= set(kinds)
    ds = kinds["DaemonSet"]["spec"]["template"]["spec"]
    c = ds["containers"][0]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz" and c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["ports"][0]["containerPort"] == 9478
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/var/log/pods"]["readOnly"] and "/var/lib/vllm-headroom" in mounts
    assert kinds["Service"]["spec"]["selector"] == kinds["DaemonSet"]["spec"]["selector"]["matchLabels"]
    assert kinds["ServiceMonitor"]["spec"]["endpoints"][0]["port"] == "metrics"
    cfg = yaml.safe_load(kinds["ConfigMap"]["data"]["config.yaml"])
    parse_config(cfg, "configmap")  # the shipped config is valid


def test_prometheus_rule_carries_exactly_the_generated_rules():
    pr = docs(DEPLOY / "kubernetes" / "prometheusrule.yaml")[0]
    on_disk = []
    for name in ("vllm-headroom.rules.yaml", "vllm-headroom.recording.yaml", "vllm-headroom.weekly.yaml"):
        on_disk += docs(ROOT / "alerts" / name)[0]["groups"]
    assert pr["spec"]["groups"] == on_disk
    t = Thresholds()
    assert pr["spec"]["groups"] == rules.alert_groups(t, alert_specs(t)) + recording.recording_rules(
        t
    ) + weekly.weekly_rules(t)


def test_compose_stack_points_at_real_files_and_valid_configs():
    compose = docs(DEPLOY / "compose" / "docker-compose.yml")[0]
    base = DEPLOY / "compose"
    assert {"vllm", "vllm-headroom", "prometheus", "alertmanager", "grafana"} <= set(compose["services"])
    for name, svc in compose["services"].items():
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("."):
                assert (base / src).exists(), (name, src)
    build = compose["services"]["vllm-headroom"]["build"]
    assert (base / build["context"] / build["dockerfile"]).exists()
    load_config(str(base / "headroom.yaml"))


def test_compose_prometheus_config_passes_promtool(tmp_path):
    promtool = need("promtool")
    text = (DEPLOY / "compose" / "prometheus.yml").read_text().replace("/etc/prometheus/rules", str(ROOT / "alerts"))
    (tmp_path / "prometheus.yml").write_text(text)
    r = subprocess.run(
        [promtool, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_alertmanager_config_passes_amtool():
    amtool = need("amtool")
    r = subprocess.run(
        [amtool, "check-config", str(DEPLOY / "compose" / "alertmanager.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_systemd_unit():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(DEPLOY / "systemd" / "vllm-headroom.service")
    svc = unit["Service"]
    assert "vllm-headroom serve --config" in svc["ExecStart"] and "check-config" in svc["ExecStartPre"]
    assert svc["KillSignal"] == "SIGTERM" and svc["StateDirectory"] == "vllm-headroom"
    assert int(svc["LimitNOFILE"]) >= 1024  # the listener's connection cap stays below it
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_dockerfile_installs_the_package_and_runs_serve():
    text = (DEPLOY / "Dockerfile").read_text()
    assert "pip install" in text and 'ENTRYPOINT ["vllm-headroom"]' in text and '"serve"' in text
    for src in ("pyproject.toml", "exporter"):
        assert (ROOT / src).exists()
