"""The vLLM pods on this node, found from the kubelet's pod log directories.

The kubelet writes every container's log under `/var/log/pods/<namespace>_<pod>_<uid>/<container>/<n>.log`
(the CRI logging layout; namespace and pod names cannot hold `_`, a UID is a UUID). A directory exists
there only for the pods scheduled on this node, so an exporter per node that follows these directories
watches each pod exactly once, with no API access and no RBAC: the property that keeps N nodes from
producing N copies of every series. Each matching pod becomes a ServerConfig through the configured
templates; the log path globs over the UID so a pod recreated under the same name (a StatefulSet or
LeaderWorkerSet pod) stays one server.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass

from exporter.config import (
    ROLES,
    KubernetesConfig,
    LogSource,
    PodRule,
    ServerConfig,
    check_name,
    check_url,
)

log = logging.getLogger("vllm_headroom.discovery")
_POD_DIR = re.compile(r"^(?P<namespace>[a-z0-9][a-z0-9-]*)_(?P<pod>[a-z0-9][a-z0-9.-]*)_(?P<uid>[0-9a-fA-F-]+)$")


@dataclass(frozen=True)
class PodDir:
    namespace: str
    pod: str
    uid: str
    containers: tuple[str, ...]


def pod_dirs(root: str) -> list[PodDir]:
    """The pods whose log directories are under `root` (this node's pods), sorted; unreadable means none."""
    try:
        entries = sorted(os.listdir(root))
    except OSError as exc:
        log.warning("cannot list pod logs in %s: %s", root, exc.strerror or exc)
        return []
    out = []
    for entry in entries:
        m = _POD_DIR.match(entry)
        if not m:
            continue
        try:
            containers = tuple(
                sorted(c for c in os.listdir(os.path.join(root, entry)) if os.path.isdir(os.path.join(root, entry, c)))
            )
        except OSError:
            continue
        out.append(PodDir(m["namespace"], m["pod"], m["uid"], containers))
    return out


def _render(template: str, fields: dict[str, str]) -> str:
    return template.format_map(fields)


def servers_for(rule: PodRule, pod: PodDir, root: str) -> ServerConfig | None:
    """The server a pod becomes under `rule`, or None when the rule does not match it or its templates give a
    value that is not valid (said in the log)."""
    if rule.container not in pod.containers or not re.fullmatch(rule.namespace, pod.namespace):
        return None
    m = re.fullmatch(rule.pod, pod.pod)
    if m is None:
        return None
    fields = {
        "namespace": pod.namespace,
        "pod": pod.pod,
        "container": rule.container,
        "uid": pod.uid,
        **{k: v or "" for k, v in m.groupdict().items()},
    }
    try:
        name = check_name(_render(rule.server, fields))
        role = _render(rule.role, fields)
        if role not in ROLES:
            raise ValueError(f"role {role!r} is not one of {', '.join(ROLES)}")
        url = check_url(_render(rule.url, fields)) if rule.url else None
    except (ValueError, KeyError) as exc:
        log.warning("pod %s/%s: skipped: %s", pod.namespace, pod.pod, exc)
        return None
    path = os.path.join(root, f"{pod.namespace}_{pod.pod}_*", rule.container, "*.log")
    return ServerConfig(
        name=name,
        url=url,
        interval_s=rule.interval_s,
        timeout_s=rule.timeout_s,
        log=LogSource(path, rule.log_format),
        role=role,
        gpus=rule.gpus,
    )


def discover(cfg: KubernetesConfig) -> list[ServerConfig]:
    """The servers of this node's vLLM pods: the first rule matching a pod wins, and two pods that would become
    the same server name on one node keep the first (by namespace and pod name) and say so."""
    found: dict[str, ServerConfig] = {}
    seen_pods: set[tuple[str, str]] = set()
    for pod in pod_dirs(cfg.pod_logs):
        if (pod.namespace, pod.pod) in seen_pods:  # an old UID's directory beside the new one
            continue
        for rule in cfg.pods:
            sc = servers_for(rule, pod, cfg.pod_logs)
            if sc is None:
                continue
            seen_pods.add((pod.namespace, pod.pod))
            if sc.name in found:
                log.warning(
                    "pod %s/%s: server %r is already watched on this node (one entry per server per "
                    "node); give each rank's pod its own server name or run one pod per node",
                    pod.namespace,
                    pod.pod,
                    sc.name,
                )
            else:
                found[sc.name] = sc
            break
    return list(found.values())
