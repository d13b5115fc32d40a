"""The fleet at scale with the real parts: N simulated GPU nodes (8 GPUs, a prefill and a decode server each,
found from the nodes' pod log directories) -> vmagent -> VictoriaMetrics -> vmalert -> Alertmanager, beside
a Prometheus server evaluating the same rules and a Prometheus in agent mode remote-writing into a second
VictoriaMetrics. Measures what docs/scale.md tabulates and writes benchmarks/scale_results.json.

    python -m benchmarks.scale [--nodes 64] [--scrape 15s] [--rules-every 15s] [--seconds 180]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

from tests.conftest import ROOT, free_port, need, wait_ready
from tests.fleet_rig import (
    Fleet,
    Pod,
    VmStack,
    Webhook,
    dashboard_queries,
    fill_variables,
    start_alertmanager,
    wait_health,
)

RESULTS = ROOT / "benchmarks" / "scale_results.json"


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.read().decode("utf-8", "replace")


def _metric_sum(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` (exact name) in a /metrics text whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        metric = head.split("{", 1)[0]
        if metric != name or not all(f'{k}="{v}"' in head for k, v in labels.items()):
            continue
        total += float(value)
    return total


def _samples(text: str) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def _rules(pods: list[Pod]) -> list[dict]:
    out = []
    for p in pods:
        role = p.name.rsplit("-", 2)[1]
        out.append(
            {
                "pod": re.escape(p.name),
                "server": p.name,
                "role": role,
                "log_format": "auto",
                "url": f"http://127.0.0.1:{p.port}/metrics",
                "interval": "5s",
                "timeout": "3s",
                "gpus": [0, 1, 2, 3] if role == "prefill" else [4, 5, 6, 7],
            }
        )
    return out


def _rule_copies(workdir: Path, every: str) -> list[Path]:
    out = []
    for path in sorted((ROOT / "alerts").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        for group in doc.get("groups", []):
            group["interval"] = every
        copy = workdir / f"prom-{path.name}"
        copy.write_text(yaml.safe_dump(doc, sort_keys=False))
        out.append(copy)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--scrape", default="15s")
    ap.add_argument("--rules-every", default="15s", help="every rule group's interval, on both evaluators")
    ap.add_argument("--seconds", type=float, default=180, help="how long to run once everything is up")
    args = ap.parse_args()
    scrape_s = float(args.scrape.rstrip("s"))
    work = Path(tempfile.mkdtemp(prefix="vllm-headroom-scale-"))
    pods = [
        Pod(
            f"node-{n:03d}",
            f"n{n:03d}-{role}-0",
            engines=2 if role == "decode" else 1,
            kv_usage=0.5 if role == "decode" else 0.3,
        )
        for n in range(args.nodes)
        for role in ("prefill", "decode")
    ]
    fleet = Fleet(str(work), pods, _rules, interval=2.0, gpu_sample_s=0.5, refresh="60s", stats_every=5)
    fleet.start()
    fleet.ready.wait(120)
    if fleet.error:
        raise fleet.error
    targets = fleet.targets()
    hook = Webhook()
    am, am_port = start_alertmanager(work, hook.port, ["alertname", "cluster", "server", "stage"])
    vm = VmStack(
        work,
        targets,
        sorted((ROOT / "alerts").glob("*.yaml")),
        am_port,
        "bench",
        scrape_interval=args.scrape,
        group_interval=args.rules_every,
    )
    # Prometheus evaluating the same rules, for the comparison of rule-evaluation time
    prom_dir = work / "prom"
    prom_dir.mkdir()
    prom_port = free_port()
    rule_files = "".join(f"  - {p}\n" for p in _rule_copies(prom_dir, args.rules_every))
    (prom_dir / "prometheus.yml").write_text(
        f"global: {{scrape_interval: {args.scrape}, evaluation_interval: {args.rules_every}}}\nrule_files:\n"
        f"{rule_files}scrape_configs:\n  - job_name: vllm-headroom\n"
        f"    static_configs: [{{targets: {json.dumps(targets)}}}]\n"
    )
    prom = subprocess.Popen(
        [
            need("prometheus"),
            f"--config.file={prom_dir / 'prometheus.yml'}",
            f"--storage.tsdb.path={prom_dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(prom_dir / "log", "wb"),
    )  # noqa: SIM115 - the child owns it
    wait_ready(f"http://127.0.0.1:{prom_port}", prom, prom_dir / "log", timeout=120)
    # Prometheus in agent mode remote-writing into a second VictoriaMetrics
    agent_dir = work / "agent"
    agent_dir.mkdir()
    vm2_port, agent_port = free_port(), free_port()
    vm2 = subprocess.Popen(
        [
            need("victoria-metrics"),
            f"-httpListenAddr=127.0.0.1:{vm2_port}",
            f"-storageDataPath={agent_dir / 'vm'}",
            "-loggerLevel=WARN",
            "-search.latencyOffset=0s",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(agent_dir / "vm.log", "wb"),
    )  # noqa: SIM115
    wait_health(f"http://127.0.0.1:{vm2_port}", vm2, agent_dir / "vm.log")
    (agent_dir / "agent.yml").write_text(
        f"global: {{scrape_interval: {args.scrape}, external_labels: {{cluster: bench}}}}\n"
        f"remote_write: [{{url: 'http://127.0.0.1:{vm2_port}/api/v1/write'}}]\nscrape_configs:\n"
        f"  - job_name: vllm-headroom\n    static_configs: [{{targets: {json.dumps(targets)}}}]\n"
    )
    agent = subprocess.Popen(
        [
            need("prometheus"),
            "--enable-feature=agent",
            f"--config.file={agent_dir / 'agent.yml'}",
            f"--storage.agent.path={agent_dir / 'wal'}",
            f"--web.listen-address=127.0.0.1:{agent_port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(agent_dir / "log", "wb"),
    )  # noqa: SIM115
    wait_ready(f"http://127.0.0.1:{agent_port}", agent, agent_dir / "log", timeout=120)
    procs = [prom, vm2, agent]
    try:
        started = time.time()
        inserted0 = _metric_sum(_get(vm.url + "/metrics"), "vm_rows_inserted_total")
        time.sleep(args.seconds)
        elapsed = time.time() - started
        vm_metrics = _get(vm.url + "/metrics")
        inserted = _metric_sum(vm_metrics, "vm_rows_inserted_total") - inserted0
        # one node's answer, as vmagent gets it
        bodies = [_get(f"http://{t}/metrics") for t in targets[:4]]
        series_node = sum(_samples(b) for b in bodies) / len(bodies)
        bytes_node = sum(len(b.encode()) for b in bodies) / len(bodies)
        gzip_node = sum(len(gzip.compress(b.encode())) for b in bodies) / len(bodies)
        active = vm.query('count({job="vllm-headroom"})')["data"]["result"]
        active_series = float(active[0]["value"][1]) if active else 0.0
        headroom_series = vm.query('count({__name__=~"vllm_headroom_.+"})')["data"]["result"]
        vmalert_metrics = _get(vm.vmalert_url + "/metrics")
        vmalert_sum = _metric_sum(vmalert_metrics, "vmalert_iteration_duration_seconds_sum")
        vmalert_count = _metric_sum(vmalert_metrics, "vmalert_iteration_duration_seconds_count")
        groups = len(re.findall(r"^vmalert_iteration_duration_seconds_count\{", vmalert_metrics, re.MULTILINE))
        prom_metrics = _get(f"http://127.0.0.1:{prom_port}/metrics")
        prom_last = _metric_sum(prom_metrics, "prometheus_rule_group_last_duration_seconds")
        prom_iter_sum = _metric_sum(prom_metrics, "prometheus_rule_group_duration_seconds_sum")
        prom_iter_count = _metric_sum(prom_metrics, "prometheus_rule_group_duration_seconds_count")
        prom_groups = len(re.findall(r"^prometheus_rule_group_last_duration_seconds\{", prom_metrics, re.MULTILINE))
        agent_series = json.loads(
            _get(f"http://127.0.0.1:{vm2_port}/api/v1/query?query=count(%7Bjob%3D%22vllm-headroom%22%7D)")
        )["data"]["result"]
        # every dashboard query, and the weekly report, against VictoriaMetrics' Prometheus API
        queries = [
            e
            for b in sorted((ROOT / "dashboards").glob("*.json"))
            for e in dashboard_queries(json.loads(b.read_text()))
        ]
        t0 = time.monotonic()
        query_errors = [e for e in queries if vm.query(fill_variables(e)).get("status") != "success"]
        dashboard_s = time.monotonic() - t0
        t0 = time.monotonic()
        report = subprocess.run(
            [
                sys.executable,
                "-m",
                "exporter",
                "report",
                "--prometheus",
                vm.url,
                "--since",
                "1h",
                "--out",
                str(work / "report.html"),
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        report_s = time.monotonic() - t0
        report_servers = (
            len(json.loads((work / "report.json").read_text())["servers"]) if report.returncode == 0 else None
        )
        urllib.request.urlopen(vm.url + "/internal/force_flush", timeout=60).read()
        time.sleep(2)
        size = _metric_sum(_get(vm.url + "/metrics"), "vm_data_size_bytes")
        servers, gpus = 2 * args.nodes, 8 * args.nodes
        result = {
            "nodes": args.nodes,
            "servers": servers,
            "gpus": gpus,
            "scrape_interval_s": scrape_s,
            "rules_every": args.rules_every,
            "seconds": round(elapsed, 1),
            "series_per_node_scrape": round(series_node, 1),
            "bytes_per_node_scrape": round(bytes_node),
            "gzip_bytes_per_node_scrape": round(gzip_node),
            "active_series_in_vm": active_series,
            "vllm_headroom_series_in_vm": float(headroom_series[0]["value"][1]) if headroom_series else 0.0,
            "series_via_prometheus_agent": float(agent_series[0]["value"][1]) if agent_series else 0.0,
            "samples_per_s_ingested": round(inserted / elapsed, 1),
            "samples_per_s_per_1000_gpus": round(inserted / elapsed * 1000 / gpus, 1),
            "vmalert_groups": groups,
            "vmalert_mean_iteration_s_all_groups": round(vmalert_sum / vmalert_count * groups, 4)
            if vmalert_count
            else None,
            "prometheus_last_iteration_s_all_groups": round(prom_last, 4),
            "prometheus_groups": prom_groups,
            "prometheus_mean_iteration_s_all_groups": round(prom_iter_sum / prom_iter_count * prom_groups, 4)
            if prom_iter_count
            else None,
            "vm_data_bytes_after_flush": size,
            "alerts_notified": len(hook.received),
            "dashboard_queries": len(queries),
            "dashboard_query_errors": query_errors,
            "dashboard_queries_s": round(dashboard_s, 2),
            "report_exit": report.returncode,
            "report_servers": report_servers,
            "report_s": round(report_s, 1),
        }
        for key in (
            "vmalert_mean_iteration_s_all_groups",
            "prometheus_last_iteration_s_all_groups",
            "prometheus_mean_iteration_s_all_groups",
        ):
            if result[key] is not None:
                result[key.replace("_all_groups", "_per_1000_servers")] = round(result[key] * 1000 / servers, 4)
        runs = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        runs[f"{args.nodes}_nodes"] = result  # one entry per fleet size: the slope is what scales
        RESULTS.write_text(json.dumps(runs, indent=1, sort_keys=True) + "\n")
        print(json.dumps(result, indent=1))
    finally:
        for p in procs:
            p.terminate()
        vm.stop()
        am.terminate()
        fleet.stop()
        hook.close()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:  # a store slow to stop under load is killed, never left behind
                p.kill()
                p.wait(10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
