"""Fleet: node-local discovery of vLLM pods, servers that span nodes, prefill/decode roles, the cluster label.

The end-to-end test runs three simulated GPU nodes, each with its own vllm-headroom configured from the same
config (one ConfigMap for the whole DaemonSet), scraped by the real Prometheus, alerting through the real
Alertmanager: every target is one series, a server whose ranks sit on two nodes is one `server`, and an OOM
printed by both ranks is one page.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

import pytest

from exporter.config import ConfigError, parse_config
from exporter.daemon import Daemon, gpu_owners
from exporter.discovery import discover, pod_dirs
from tests.conftest import ROOT, start_prometheus
from tests.fleet_rig import Fleet, Pod, Webhook, start_alertmanager

DEADLINE_S = 90


# -- config ---------------------------------------------------------------------------------------


def test_role_gpus_cluster_and_log_only_servers_are_read():
    cfg = parse_config(
        {
            "cluster": "gb300-east",
            "servers": [
                {
                    "name": "dsr1-decode-0",
                    "url": "http://127.0.0.1:8000/metrics",
                    "role": "decode",
                    "gpus": [0, 1, 2, 3],
                    "log": "/var/log/vllm/decode.log",
                },
                {
                    "name": "dsr1-prefill-0",
                    "url": None,
                    "role": "prefill",
                    "gpus": [4, 5, 6, 7],
                    "log": "/var/log/vllm/prefill-rank1.log",
                },
            ],
        }
    )
    assert cfg.cluster == "gb300-east"
    decode, prefill = cfg.servers
    assert (decode.role, decode.gpus, prefill.url, prefill.role) == ("decode", (0, 1, 2, 3), None, "prefill")
    assert parse_config({"servers": [{"name": "a"}]}).servers[0].role == "both"  # the default
    assert gpu_owners(list(cfg.servers))["5"] == ("dsr1-prefill-0", "prefill")


def test_fleet_config_mistakes_are_all_named_at_once():
    with pytest.raises(ConfigError) as err:
        parse_config(
            {
                "cluster": "no spaces allowed",
                "servers": [
                    {"name": "a", "role": "prefil", "gpus": [0, 0]},
                    {"name": "b", "url": None},
                    {"name": "c", "gpus": [1]},
                    {"name": "d", "gpus": [1]},
                ],
                "kubernetes": {
                    "pod_logs": "/var/log/pods",
                    "pods": [
                        {"pod": "vllm-(?P<rank>\\d+", "server": "{pod}"},
                        {"pod": "vllm-(?P<rank>\\d+)", "server": "{node}-{rank}", "role": "{rank}", "colour": "blue"},
                        {"namespace": "inference"},
                    ],
                },
            },
            "fleet.yaml",
        )
    text = "\n".join(err.value.problems)
    for where in (
        "fleet.yaml: cluster:",
        "servers[0].role: expected one of prefill, decode, both",
        "servers[0].gpus: expected each GPU index once",
        "servers[1].url: null",
        "servers[3].gpus: GPU 1 is already used by server 'c'",
        "kubernetes.pods[0].pod: expected a valid regular expression",
        "kubernetes.pods[1].server: unknown template field(s) node",
        "kubernetes.pods[1].colour: unknown key",
        "kubernetes.pods[2].pod: missing",
    ):
        assert where in text, (where, text)


# -- KV transfer between pools -------------------------------------------------------------------


def _reexported(text: str, role: str) -> dict[str, list]:
    from exporter.config import ServerConfig
    from exporter.daemon import ServerState
    from exporter.exposition_parser import parse
    from exporter.vllm.names import normalize
    from exporter.vllm.scrape import ScrapeResult

    st = ServerState(ServerConfig(name=f"dsr1-{role}-0", role=role), 300.0, None, cluster="gb300-east")
    st.update(ScrapeResult(True, series=normalize(parse(text).samples)), 0.0)
    return {name: samples for name, (samples, _text) in st.reexported().items() if samples}


def test_nixl_transfer_health_is_passed_on_with_role_and_absent_stays_absent():
    # the NIXL families as vLLM's NixlPromMetrics writes them (counters with _total, one histogram per engine)
    decode = (
        "# TYPE vllm:nixl_num_failed_transfers counter\n"
        'vllm:nixl_num_failed_transfers_total{engine="0",model_name="kimi-k3"} 3.0\n'
        "# TYPE vllm:nixl_num_failed_notifications counter\n"
        'vllm:nixl_num_failed_notifications_total{engine="0",model_name="kimi-k3"} 0.0\n'
        "# TYPE vllm:nixl_xfer_time_seconds histogram\n"
        'vllm:nixl_xfer_time_seconds_bucket{engine="0",le="0.01",model_name="kimi-k3"} 40.0\n'
        'vllm:nixl_xfer_time_seconds_bucket{engine="0",le="+Inf",model_name="kimi-k3"} 42.0\n'
        'vllm:nixl_xfer_time_seconds_sum{engine="0",model_name="kimi-k3"} 0.5\n'
        'vllm:nixl_xfer_time_seconds_count{engine="0",model_name="kimi-k3"} 42.0\n'
        'vllm:num_requests_running{engine="0",model_name="kimi-k3"} 4.0\n'
    )
    got = _reexported(decode, "decode")
    failed = got["vllm:nixl_num_failed_transfers_total"]
    assert [(s.name, s.value) for s in failed] == [("vllm_headroom_nixl_failed_transfers_total", 3.0)]
    assert failed[0].labels == {
        "server": "dsr1-decode-0",
        "role": "decode",
        "cluster": "gb300-east",
        "model_name": "kimi-k3",
        "engine": "0",
    }
    assert got["vllm:nixl_num_failed_notifications_total"][0].value == 0.0  # a real 0 stays a 0
    assert len(got["vllm:nixl_xfer_time_seconds"]) == 4
    # a server without NIXL (or a vLLM before 0.11.1) exports none of it: absent, never a made-up 0
    plain = _reexported('vllm:num_requests_running{engine="0",model_name="kimi-k3"} 4.0\n', "prefill")
    assert not [n for n in plain if "nixl" in n]
    assert plain["vllm:num_requests_running"][0].labels["role"] == "prefill"


# -- discovery ------------------------------------------------------------------------------------


def _pod(
    root: Path, namespace: str, pod: str, container: str = "vllm", uid: str = "6f1c3e2a-1b2c-4d5e-8f90-a1b2c3d4e5f6"
):
    d = root / f"{namespace}_{pod}_{uid}" / container
    d.mkdir(parents=True)
    (d / "0.log").write_text("")
    return d


def test_only_this_nodes_vllm_pods_become_servers(tmp_path):
    node_a, node_b = tmp_path / "a", tmp_path / "b"
    _pod(node_a, "inference", "dsr1-decode-0")
    _pod(node_a, "inference", "dsr1-decode-0", uid="0000aaaa-1b2c-4d5e-8f90-a1b2c3d4e5f6")  # the pod recreated
    _pod(node_a, "kube-system", "coredns-5d78c9869d-x7x2q", container="coredns")
    _pod(node_a, "inference", "sidecar-only-0", container="envoy")
    _pod(node_b, "inference", "dsr1-decode-0-1")
    _pod(node_b, "inference", "dsr1-prefill-0")
    (node_b / "not-a-pod-dir").mkdir()
    rules = {
        "pods": [
            {
                "pod": r"dsr1-(?P<role>prefill|decode)-(?P<group>\d+)-(?P<rank>\d+)",
                "server": "dsr1-{role}-{group}",
                "role": "{role}",
                "url": None,
            },
            {
                "pod": r"dsr1-(?P<role>prefill|decode)-(?P<group>\d+)",
                "server": "dsr1-{role}-{group}",
                "role": "{role}",
                "url": "http://{pod}.dsr1.{namespace}.svc:8000/metrics",
            },
        ]
    }
    seen = {}
    for node in (node_a, node_b):
        cfg = parse_config({"kubernetes": {"pod_logs": str(node), **rules}}, "<k8s>")
        assert cfg.servers == ()  # nothing configured by hand: no default localhost server either
        seen[node.name] = {sc.name: sc for sc in discover(cfg.kubernetes)}
    assert sorted(seen["a"]) == ["dsr1-decode-0"]
    assert sorted(seen["b"]) == ["dsr1-decode-0", "dsr1-prefill-0"]
    head, worker = seen["a"]["dsr1-decode-0"], seen["b"]["dsr1-decode-0"]
    assert head.url == "http://dsr1-decode-0.dsr1.inference.svc:8000/metrics" and worker.url is None
    assert head.role == worker.role == "decode" and seen["b"]["dsr1-prefill-0"].role == "prefill"
    assert head.log is not None and head.log.path == str(node_a / "inference_dsr1-decode-0_*" / "vllm" / "*.log")
    assert [p.pod for p in pod_dirs(str(node_a))].count("dsr1-decode-0") == 2
    assert discover(parse_config({"kubernetes": {"pod_logs": str(tmp_path / "absent"), **rules}}).kubernetes) == []


def test_a_template_giving_a_bad_role_skips_that_pod_only(tmp_path, caplog):
    _pod(tmp_path, "inference", "vllm-router-0")
    _pod(tmp_path, "inference", "vllm-decode-0")
    cfg = parse_config(
        {"kubernetes": {"pod_logs": str(tmp_path), "pods": [{"pod": r"vllm-(?P<kind>[a-z]+)-\d+", "role": "{kind}"}]}}
    )
    assert [sc.name for sc in discover(cfg.kubernetes)] == ["vllm-decode-0"]
    assert "vllm-router-0" in caplog.text and "role 'router'" in caplog.text


def test_check_config_says_what_this_node_would_watch(tmp_path, capsys):
    from exporter.cli import main

    _pod(tmp_path / "pods", "inference", "vllm-decode-0")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"kubernetes:\n  pod_logs: {tmp_path / 'pods'}\n  pods:\n"
        "    - {pod: 'vllm-(?P<role>decode|prefill)-\\d+', role: '{role}', url: 'http://{pod}.v.svc:8000/metrics'}\n"
    )
    assert main(["check-config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "1 pod rule(s)" in out and "vllm-decode-0 (role decode): http://vllm-decode-0.v.svc:8000/metrics" in out


def test_a_configured_cluster_and_gpu_owners_label_every_series(tmp_path):
    from exporter.exposition_writer import text_format
    from exporter.gpu.fake import FakeGpuBackend
    from exporter.gpu.sampler import GpuSampler

    cfg = parse_config(
        {
            "cluster": "gb300-east",
            "state_dir": str(tmp_path),
            "gpu": {"backend": "none"},
            "servers": [{"name": "p", "role": "prefill", "gpus": [0, 1]}, {"name": "d", "role": "decode", "gpus": [2]}],
        }
    )
    daemon = Daemon(cfg)
    daemon.gpu = GpuSampler(FakeGpuBackend(count=4), 0.1)
    daemon.gpu.sample_once()
    lines = [ln for ln in text_format(daemon.registry).decode().splitlines() if ln.startswith("vllm_headroom_")]
    assert lines and all('cluster="gb300-east"' in ln for ln in lines)
    used = {re.search(r'gpu="(\d)"', ln)[1]: ln for ln in lines if ln.startswith("vllm_headroom_gpu_memory_used_bytes")}
    assert 'server="p"' in used["1"] and 'role="prefill"' in used["1"]
    assert 'server="d"' in used["2"] and 'role="decode"' in used["2"]
    assert "server=" not in used["3"]  # a GPU no server names stays unlabelled
    up = [ln for ln in lines if ln.startswith("vllm_headroom_target_up")]
    assert sorted(up) == sorted(
        [
            'vllm_headroom_target_up{cluster="gb300-east",role="decode",server="d"} 0.0',
            'vllm_headroom_target_up{cluster="gb300-east",role="prefill",server="p"} 0.0',
        ]
    )


def test_pods_that_come_and_go_are_picked_up_and_dropped(tmp_path):
    cfg = parse_config(
        {
            "state_dir": str(tmp_path / "state"),
            "kubernetes": {"pod_logs": str(tmp_path / "pods"), "pods": [{"pod": "vllm-.*"}]},
        }
    )
    daemon = Daemon(cfg)
    assert daemon.servers == {}
    d = _pod(tmp_path / "pods", "inference", "vllm-0")
    wanted = daemon.wanted()
    assert daemon.retire(wanted) == [] and daemon.admit(wanted) == ["vllm-0"]
    assert daemon.admit(daemon.wanted()) == []  # already watched
    for f in d.iterdir():
        f.unlink()
    d.rmdir()
    d.parent.rmdir()
    wanted = daemon.wanted()
    assert [st.name for st in daemon.retire(wanted)] == ["vllm-0"] and daemon.admit(wanted) == []
    assert daemon.servers == {}


# -- three nodes, one ConfigMap, real Prometheus and Alertmanager -----------------------------------

PODS = [
    Pod("node-a", "dsr1-decode-0", engines=2, kv_usage=0.7),
    Pod("node-b", "dsr1-decode-0-1", serves=False),
    Pod("node-c", "dsr1-prefill-0", kv_usage=0.2),
]


def rules(pods: list[Pod]) -> list[dict]:
    """The shared config's pod rules: worker ranks (log only) by pattern, API servers by name with their URL
    (in a cluster: `http://{pod}.<service>.{namespace}.svc:8000/metrics`; here each stand-in has its own port)."""
    out: list[dict] = [
        {
            "pod": r"dsr1-(?P<role>prefill|decode)-(?P<group>\d+)-\d+",
            "server": "dsr1-{role}-{group}",
            "role": "{role}",
            "url": None,
            "log_format": "auto",
        }
    ]
    for p in pods:
        if p.serves:
            role = "decode" if "decode" in p.name else "prefill"
            out.append(
                {
                    "pod": re.escape(p.name),
                    "server": p.name,
                    "role": role,
                    "log_format": "auto",
                    "url": f"http://127.0.0.1:{p.port}/metrics",
                    "interval": "0.5s",
                    "timeout": "0.5s",
                }
            )
    return out


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    d = tmp_path_factory.mktemp("fleet")
    rig = Fleet(str(d), PODS, rules)
    rig.start()
    rig.ready.wait(30)
    if rig.error:
        raise rig.error
    hook = Webhook()
    am, am_port = start_alertmanager(d, hook.port, ["alertname", "cluster", "server", "stage"])
    rule_files = "".join(f"  - {p}\n" for p in sorted((ROOT / "alerts").glob("*.yaml")))
    targets = ", ".join(f'"{t}"' for t in rig.targets())
    prom = start_prometheus(
        d,
        f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s, external_labels: {{cluster: gb300-east}}}}
rule_files:
{rule_files}
alerting:
  alertmanagers:
    - static_configs: [{{targets: ["127.0.0.1:{am_port}"]}}]
scrape_configs:
  - job_name: vllm-headroom
    static_configs: [{{targets: [{targets}]}}]
""",
    )
    yield rig, prom, hook, am_port
    prom.proc.terminate()
    am.terminate()
    rig.stop()
    hook.close()
    prom.proc.wait(10)
    am.wait(10)


def _counts(prom, expr: str, *labels: str) -> dict:
    answer = prom.query(expr)
    assert answer["status"] == "success", (expr, answer)
    return {tuple(r["metric"].get(k, "") for k in labels): float(r["value"][1]) for r in answer["data"]["result"]}


def _eventually(prom, expr: str, labels: tuple[str, ...], want: dict) -> None:
    deadline = time.monotonic() + DEADLINE_S
    got: dict = {}
    while time.monotonic() < deadline:
        got = _counts(prom, expr, *labels)
        if got == want:
            return
        time.sleep(0.5)
    assert got == want, expr


def test_every_target_is_one_series_and_a_two_node_server_is_one_server(fleet):
    _, prom, _, _ = fleet
    srv = ("server", "role")
    _eventually(
        prom,
        "count by (server, role) (vllm_headroom_target_up == 1)",
        srv,
        {("dsr1-decode-0", "decode"): 1, ("dsr1-prefill-0", "prefill"): 1},
    )
    # a rank per node: each node follows its own rank's log, one stage machine per rank
    _eventually(
        prom,
        "count by (server, role) (vllm_headroom_engine_ready == 1)",
        srv,
        {("dsr1-decode-0", "decode"): 2, ("dsr1-prefill-0", "prefill"): 1},
    )
    _eventually(
        prom,
        "count by (server, role) (vllm_headroom_gpu_memory_used_bytes)",
        srv,
        {("dsr1-decode-0", "decode"): 16, ("dsr1-prefill-0", "prefill"): 8},
    )
    _eventually(
        prom,
        "count by (server, role) (vllm_headroom_kv_cache_usage_ratio)",
        srv,
        {("dsr1-decode-0", "decode"): 2, ("dsr1-prefill-0", "prefill"): 1},
    )  # two DP engines
    # the server's GPU headroom is its worst GPU, over both nodes
    _eventually(
        prom,
        "count by (server) (min by (server) (vllm_headroom_gpu_memory_headroom_ratio))",
        ("server",),
        {("dsr1-decode-0",): 1, ("dsr1-prefill-0",): 1},
    )
    assert _counts(prom, "vllm_headroom_log_file_present == 0", "instance") == {}  # no node misses a log
    servers = _counts(prom, "count by (server) (vllm_headroom_engine_stage)", "server")
    assert set(servers) == {("dsr1-decode-0",), ("dsr1-prefill-0",)}  # coredns and friends are not servers


def test_an_oom_printed_by_both_ranks_is_one_page(fleet):
    _, prom, hook, am_port = fleet
    _eventually(
        prom,
        "count by (server) (vllm_headroom_engine_ready == 1)",
        ("server",),
        {("dsr1-decode-0",): 2, ("dsr1-prefill-0",): 1},
    )
    for pod in PODS[:2]:  # the head and the worker rank both print the failure
        assert pod.writer is not None
        pod.writer.oom("decode")
    firing = 'ALERTS{alertname="VllmRuntimeOOM", alertstate="firing"}'
    _eventually(prom, f"count by (server, stage) ({firing})", ("server", "stage"), {("dsr1-decode-0", "decode"): 2})
    deadline = time.monotonic() + DEADLINE_S
    groups: list = []
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{am_port}/api/v2/alerts/groups", timeout=5) as r:
            groups = [g for g in json.loads(r.read()) if g["labels"].get("alertname") == "VllmRuntimeOOM"]
        if sum(len(g["alerts"]) for g in groups) == 2 and any(
            n["groupLabels"].get("alertname") == "VllmRuntimeOOM" for n in hook.received
        ):
            break
        time.sleep(0.5)
    assert len(groups) == 1, groups  # one incident, one notification group: one page
    assert groups[0]["labels"] == {
        "alertname": "VllmRuntimeOOM",
        "cluster": "gb300-east",
        "server": "dsr1-decode-0",
        "stage": "decode",
    }
    pages = {n["groupKey"] for n in hook.received if n["groupLabels"].get("alertname") == "VllmRuntimeOOM"}
    assert len(pages) == 1, hook.received
    # the generated rule fires once per rank (it keeps `instance`); aggregated over the ranks as docs/deploy.md
    # advises, the incident is one series with the server's role
    per_server = (
        "max by (job, server, role, stage) (sum by (job, instance, server, role, stage) "
        '(increase(vllm_headroom_oom_events_total{job="vllm-headroom", phase="runtime"}[10m]))) > 0'
    )
    assert list(_counts(prom, per_server, "server", "role", "stage")) == [("dsr1-decode-0", "decode", "decode")]
