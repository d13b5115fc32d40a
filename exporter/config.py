"""The daemon's configuration: YAML in, typed dataclasses out, and errors a person can act on.

Every error names the file, the key path (`servers[1].url`) and what was expected; unknown keys are
errors (a misspelt `interval` silently ignored is a 3 a.m. mystery); all errors are reported at once.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import reprlib
import string
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urlparse, urlsplit, urlunsplit

import yaml

from exporter.duration import lenient_seconds

DEFAULT_LISTEN = "0.0.0.0:9478"
DEFAULT_URL = "http://127.0.0.1:8000/metrics"
DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
GPU_BACKENDS = ("auto", "nvml", "amdsmi", "fake", "none")
ROLES = ("prefill", "decode", "both")  # disaggregated serving: a prefill pool, a decode pool, or neither
DEFAULT_POD_LOGS = "/var/log/pods"
LOG_FORMATS = ("auto", "plain", "cri", "docker")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
_SIZE = re.compile(r"^\s*(\d+)\s*(B|KiB|MiB|GiB|KB|MB|GB)?\s*$")
MAX_DURATION_S = 30 * 86400.0
MAX_SIZE = 1024**4
_SIZES = {None: 1, "B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "KB": 1000, "MB": 1000**2, "GB": 1000**3}


class ConfigError(Exception):
    """One or more problems in a config file; `problems` lists them all."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _value in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the base class reports it
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def load_yaml(path: str, what: str = "config file") -> Any:
    """Read a YAML file as config is read: every way it can be unreadable becomes one ConfigError naming the
    file (and the line where YAML says), never a traceback."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read the {what}: {exc.strerror or exc}"]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{path}: not a UTF-8 text file (byte {exc.start})"]) from None
    return parse_yaml(text, path)


def parse_yaml(text: str, source: str) -> Any:
    """YAML text as every file of ours is read: PyYAML's safe loader refusing duplicate keys, and one ConfigError
    naming the source and the line for anything it cannot parse."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError([f"{source}: {where}invalid YAML: {problem}"]) from None
    except RecursionError:
        raise ConfigError([f"{source}: invalid YAML: nested too deeply"]) from None


def redact_url(url: str) -> str:
    """The URL without its user name and password, for pages and logs (`http://user:pass@host` is allowed in
    a target URL, and the landing page is not behind auth)."""
    try:
        parts = urlsplit(url)
        if parts.username is None and parts.password is None:
            return url
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"***@{host}" + (f":{parts.port}" if parts.port is not None else "")
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    except ValueError:
        return "<unparsable URL>"


def redact_text(text: str, url: str) -> str:
    """`text` (an error message) with the URL's credentials replaced, wherever they appear."""
    try:
        parts = urlsplit(url)
        secrets = [s for s in (parts.password, parts.username) if s]
    except ValueError:
        return text
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


@dataclass(frozen=True)
class LogSource:
    path: str
    format: str = "auto"


@dataclass(frozen=True)
class ServerConfig:
    """One vLLM server as seen from this node. `url` is None for a rank whose API server runs on another node
    (a worker of a server that spans nodes): its log is followed, nothing is scraped."""

    name: str
    url: str | None = DEFAULT_URL
    interval_s: float = 5.0
    timeout_s: float = 3.0
    # vLLM with 32 DP engines answers ~360 KB (the simulator's payload in benchmarks/bench_parse.py); 4 MiB leaves
    # room for ten times that, and bounds the memory and parse time a misbehaving target can cost
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    log: LogSource | None = None
    role: str = "both"
    gpus: tuple[int, ...] | str = ()  # GPU indices on this node the server uses, or "all"

    @property
    def safe_url(self) -> str:
        return redact_url(self.url) if self.url else "<no url: log only>"


@dataclass(frozen=True)
class PodRule:
    """Which pods on this node are vLLM servers, and what each becomes (see exporter/discovery.py)."""

    namespace: str = ".*"  # regular expressions, matched in full
    pod: str = ".*"
    container: str = "vllm"
    server: str = "{pod}"  # templates: {namespace} {pod} {container} and the pod pattern's named groups
    role: str = "both"
    url: str | None = None
    interval_s: float = 5.0
    timeout_s: float = 3.0
    log_format: str = "cri"
    gpus: tuple[int, ...] | str = "all"


@dataclass(frozen=True)
class KubernetesConfig:
    """Discovery of the vLLM pods on this node from the kubelet's log directories (one DaemonSet pod per node)."""

    pod_logs: str = DEFAULT_POD_LOGS
    refresh_s: float = 30.0
    pods: tuple[PodRule, ...] = ()


@dataclass(frozen=True)
class GpuConfig:
    backend: str = "auto"
    sample_interval_s: float = 0.1
    fake_count: int = 8
    fake_model: str = "NVIDIA GB300"
    fake_total_bytes: int = 288 * 1024**3


@dataclass(frozen=True)
class EnvironmentConfig:
    """The guide's prerequisites, checked against what the GPUs and vLLM report."""

    min_driver_version: str = "580"
    min_cuda_driver_major: int = 13
    gpu_models: tuple[str, ...] = ("GB300", "B300", "MI355X", "MI350X")
    min_gpu_count: int = 8
    min_vllm_version: str = "0.27.1"


@dataclass(frozen=True)
class Config:
    listen_address: str = DEFAULT_LISTEN
    servers: tuple[ServerConfig, ...] = (ServerConfig(name="local"),)
    gpu: GpuConfig = field(default_factory=GpuConfig)
    prefix_cache_window_s: float = 300.0
    state_dir: str = "~/.local/state/vllm-headroom"
    state_save_interval_s: float = 10.0  # offsets and counters saved together; a kill re-reads since the last save
    web_config_file: str | None = None
    environment: EnvironmentConfig = field(default_factory=EnvironmentConfig)
    cluster: str | None = None  # added as a `cluster` label when set; else Prometheus' external labels carry it
    kubernetes: KubernetesConfig | None = None
    source: str = "<defaults>"


# -- value checkers: each returns the converted value or raises ValueError("expected ...") ---------------


def _duration(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError("expected a duration such as 5s, 100ms or 2m")
    try:
        if isinstance(v, (int, float)):
            seconds = float(v)
        else:
            if not isinstance(v, str):
                raise ValueError("expected a duration such as 5s, 100ms or 2m")
            seconds = lenient_seconds(v)
    except OverflowError:
        seconds = math.inf
    if not math.isfinite(seconds) or seconds > MAX_DURATION_S:  # .nan / .inf once made the scrape loop spin
        raise ValueError("expected a finite duration of at most 30d")
    if seconds <= 0:
        raise ValueError("expected a duration above zero")
    return seconds


def _size(v: Any) -> int:
    if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_SIZE:
        return v
    m = _SIZE.match(str(v)) if isinstance(v, str) and len(v) <= 32 else None
    if not m or not 0 < int(m.group(1)) * _SIZES[m.group(2)] <= MAX_SIZE:
        raise ValueError("expected a size in bytes such as 16777216 or 16MiB, at most 1TiB")
    return int(m.group(1)) * _SIZES[m.group(2)]


def _positive_int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1_000_000:
        raise ValueError("expected a whole number from 1 to 1000000")
    return v


def _string(v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ValueError("expected a non-empty string")
    return v


def _version(v: Any) -> str:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        v = str(v)
    if not isinstance(v, str) or not re.match(r"^\d+(\.\d+)*$", v.strip()):
        raise ValueError("expected a version such as 580 or 580.65.06")
    return v.strip()


def _one_of(options: tuple[str, ...]) -> Callable[[Any], str]:
    def check(v: Any) -> str:
        if v not in options:
            raise ValueError("expected one of " + ", ".join(options))
        return v

    return check


def _url(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError("expected an http:// or https:// URL")
    parsed = urlparse(v)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError("expected an http:// or https:// URL such as http://127.0.0.1:8000/metrics")
    return v


def _listen(v: Any) -> str:
    if not isinstance(v, str) or not re.match(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]*):\d{1,5}$", v):
        raise ValueError("expected host:port such as 0.0.0.0:9478 or [::1]:9478")
    if not 0 < int(v.rsplit(":", 1)[1]) < 65536:
        raise ValueError("expected a port between 1 and 65535")
    return v


def check_listen_address(v: Any) -> str:
    """host:port for the listener (`:9478` means all interfaces)."""
    return _listen(v)


def check_name(v: Any) -> str:
    """A server name (the `server` label value); ValueError saying what is expected."""
    return _name(v)


def check_url(v: Any) -> str:
    """An http(s) URL to scrape; ValueError saying what is expected."""
    return _url(v)


def _name(v: Any) -> str:
    if not isinstance(v, str) or not _NAME.match(v):
        raise ValueError("expected a short name of letters, digits, '.', '_', ':' or '-' (at most 64)")
    return v


def _gpus(v: Any) -> tuple[int, ...] | str:
    if v == "all":
        return "all"
    if (
        not isinstance(v, list)
        or not v
        or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1024 for x in v)
    ):
        raise ValueError("expected all, or a list of GPU indices on this node such as [0, 1, 2, 3]")
    if len(set(v)) != len(v):
        raise ValueError("expected each GPU index once")
    return tuple(v)


def _regex(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise ValueError("expected a regular expression")
    try:
        re.compile(v)
    except re.error as exc:
        raise ValueError(f"expected a valid regular expression ({exc})") from None
    return v


def _template_or_null(v: Any) -> str | None:
    return None if v is None else _string(v)


def template_fields(template: str) -> list[str]:
    """The {placeholders} a template names; ValueError when it is malformed."""
    try:
        return [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise ValueError(f"malformed template ({exc})") from None


def _model_list(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not v or not all(isinstance(x, str) and x for x in v):
        raise ValueError("expected a list of GPU model names")
    return tuple(v)


class _Reader:
    """Walks the YAML tree, converting values and collecting every problem with its key path."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.problems: list[str] = []

    def problem(self, path: str, text: str) -> None:
        self.problems.append(f"{self.source}: {path or '<top>'}: {text}")

    def section(self, data: Any, path: str, spec: dict[str, Callable[[Any], Any]]) -> dict[str, Any]:
        if data is None:
            return {}
        if not isinstance(data, dict):
            self.problem(path, f"expected a mapping with keys {', '.join(spec)}, got {type(data).__name__}")
            return {}
        out: dict[str, Any] = {}
        for key, value in data.items():
            where = f"{path}.{key}" if path else str(key)
            if key not in spec:
                close = difflib.get_close_matches(str(key), list(spec), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else f" (known keys: {', '.join(spec)})"
                self.problem(where, "unknown key" + hint)
                continue
            try:
                out[key] = spec[key](value)
            except ValueError as exc:
                self.problem(where, f"{exc}, got {_shown(key, value)}")
        return out


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxstring, _SHORT.maxother = 2, 4, 4, 60, 60
_SHORT.maxlong = 40


def _shown(key: str, value: Any) -> str:
    """A value for an error message, bounded however the value was built (a YAML alias bomb expands to
    gigabytes under repr); never one that may be a secret."""
    if any(word in str(key).lower() for word in ("password", "secret", "token", "auth", "key")):
        return "<hidden>"
    text = _SHORT.repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_gpu_claims(r: _Reader, servers: list[ServerConfig]) -> None:
    """A GPU belongs to one server on a node: its series carry that server's name and role."""
    claimed: dict[int, str] = {}
    for i, sc in enumerate(servers):
        for gpu in sc.gpus if isinstance(sc.gpus, tuple) else ():
            if gpu in claimed:
                r.problem(f"servers[{i}].gpus", f"GPU {gpu} is already used by server {claimed[gpu]!r}")
            claimed[gpu] = sc.name
    if sum(1 for sc in servers if sc.gpus == "all") > 1 or (claimed and any(sc.gpus == "all" for sc in servers)):
        r.problem("servers", "gpus: all may be given to one server only, and then no other server names GPUs")


def parse_config(data: Any, source: str = "<config>") -> Config:
    r = _Reader(source)
    top = r.section(
        data,
        "",
        {
            "listen_address": _listen,
            "servers": lambda v: v,
            "gpu": lambda v: v,
            "windows": lambda v: v,
            "state_dir": _string,
            "state_save_interval": _duration,
            "web_config_file": _string,
            "environment": lambda v: v,
            "cluster": _name,
            "kubernetes": lambda v: v,
        },
    )
    servers: list[ServerConfig] = []
    raw_servers = top.get("servers", None)
    if raw_servers is not None and (not isinstance(raw_servers, list) or not raw_servers):
        r.problem("servers", "expected a non-empty list of servers, each with at least a name")
        raw_servers = None
    seen: set[str] = set()
    for i, item in enumerate(raw_servers or []):
        path = f"servers[{i}]"
        s = r.section(
            item,
            path,
            {
                "name": _name,
                "url": lambda v: None if v is None else _url(v),
                "interval": _duration,
                "timeout": _duration,
                "max_response_bytes": _size,
                "log": lambda v: v,
                "role": _one_of(ROLES),
                "gpus": _gpus,
            },
        )
        if isinstance(item, dict) and "name" not in item:
            r.problem(f"{path}.name", "missing: every server needs a name (it becomes the `server` label)")
        name = s.get("name")
        if name in seen:
            r.problem(f"{path}.name", f"duplicate server name {name!r}: names must be unique")
        if name:
            seen.add(name)
        log = None
        if "log" in s:
            raw_log = s["log"]
            if isinstance(raw_log, str):
                raw_log = {"path": raw_log}
            lg = r.section(raw_log, f"{path}.log", {"path": _string, "format": _one_of(LOG_FORMATS)})
            if isinstance(raw_log, dict) and "path" not in raw_log:
                r.problem(f"{path}.log.path", "missing: the path of the vLLM log file to follow")
            if "path" in lg:
                log = LogSource(os.path.expanduser(lg["path"]), lg.get("format", "auto"))
        interval = s.get("interval", 5.0)
        timeout = s.get("timeout", min(3.0, interval))
        if timeout > interval:
            r.problem(f"{path}.timeout", f"expected at most the interval ({interval:g}s), got {timeout:g}s")
        url = s.get("url", DEFAULT_URL)
        if isinstance(item, dict) and "url" in item and url is None and "log" not in item:
            r.problem(f"{path}.url", "null (a rank whose API server runs on another node) needs a log to follow")
        servers.append(
            ServerConfig(
                name=name or f"server{i}",
                url=url,
                interval_s=interval,
                timeout_s=timeout,
                max_response_bytes=s.get("max_response_bytes", DEFAULT_MAX_RESPONSE_BYTES),
                log=log,
                role=s.get("role", "both"),
                gpus=s.get("gpus", ()),
            )
        )
    _check_gpu_claims(r, servers)
    kubernetes = _kubernetes(r, top.get("kubernetes")) if "kubernetes" in top else None
    g = r.section(
        top.get("gpu"),
        "gpu",
        {
            "backend": _one_of(GPU_BACKENDS),
            "sample_interval": _duration,
            "fake_count": _positive_int,
            "fake_model": _string,
            "fake_total_bytes": _size,
        },
    )
    w = r.section(top.get("windows"), "windows", {"prefix_cache_hit_ratio": _duration})
    e = r.section(
        top.get("environment"),
        "environment",
        {
            "min_driver_version": _version,
            "min_cuda_driver_major": _positive_int,
            "gpu_models": _model_list,
            "min_gpu_count": _positive_int,
            "min_vllm_version": _version,
        },
    )
    if r.problems:
        raise ConfigError(r.problems)
    defaults = Config()
    return Config(
        listen_address=top.get("listen_address", DEFAULT_LISTEN),
        servers=tuple(servers) if servers or kubernetes else defaults.servers,
        gpu=GpuConfig(
            **{
                k2: g[k1]
                for k1, k2 in (
                    ("backend", "backend"),
                    ("sample_interval", "sample_interval_s"),
                    ("fake_count", "fake_count"),
                    ("fake_model", "fake_model"),
                    ("fake_total_bytes", "fake_total_bytes"),
                )
                if k1 in g
            }
        ),
        prefix_cache_window_s=w.get("prefix_cache_hit_ratio", defaults.prefix_cache_window_s),
        state_dir=os.path.expanduser(top.get("state_dir", defaults.state_dir)),
        state_save_interval_s=top.get("state_save_interval", defaults.state_save_interval_s),
        web_config_file=top.get("web_config_file"),
        environment=EnvironmentConfig(**e),
        cluster=top.get("cluster"),
        kubernetes=kubernetes,
        source=source,
    )


_POD_FIELDS = ("namespace", "pod", "container", "uid")


def _kubernetes(r: _Reader, data: Any) -> KubernetesConfig | None:
    """The `kubernetes` section: where the kubelet keeps pod logs and which pods are vLLM servers."""
    k = r.section(data, "kubernetes", {"pod_logs": _string, "refresh": _duration, "pods": lambda v: v})
    raw = k.get("pods")
    if not isinstance(raw, list) or not raw:
        r.problem("kubernetes.pods", "expected a non-empty list of pod rules, each with at least a pod pattern")
        return None
    rules = []
    for i, item in enumerate(raw):
        path = f"kubernetes.pods[{i}]"
        p = r.section(
            item,
            path,
            {
                "namespace": _regex,
                "pod": _regex,
                "container": _name,
                "server": _string,
                "role": _string,
                "url": _template_or_null,
                "interval": _duration,
                "timeout": _duration,
                "log_format": _one_of(LOG_FORMATS),
                "gpus": _gpus,
            },
        )
        if isinstance(item, dict) and "pod" not in item:
            r.problem(
                f"{path}.pod", "missing: a regular expression for the pod names (named groups become template fields)"
            )
        groups = list(re.compile(p["pod"]).groupindex) if "pod" in p else []
        for key in ("server", "role", "url"):
            template = p.get(key)
            if not template:
                continue
            try:
                unknown = [f for f in template_fields(template) if f not in _POD_FIELDS and f not in groups]
            except ValueError as exc:
                r.problem(f"{path}.{key}", f"{exc}, got {_shown(key, template)}")
                continue
            if unknown:
                r.problem(
                    f"{path}.{key}",
                    f"unknown template field(s) {', '.join(unknown)}: expected "
                    f"{', '.join(_POD_FIELDS + tuple(groups))}",
                )
        role = p.get("role", "both")
        if "{" not in role and role not in ROLES:
            r.problem(f"{path}.role", f"expected one of {', '.join(ROLES)} or a template, got {_shown('role', role)}")
        interval = p.get("interval", 5.0)
        timeout = p.get("timeout", min(3.0, interval))
        if timeout > interval:
            r.problem(f"{path}.timeout", f"expected at most the interval ({interval:g}s), got {timeout:g}s")
        rules.append(
            PodRule(
                namespace=p.get("namespace", ".*"),
                pod=p.get("pod", ".*"),
                container=p.get("container", "vllm"),
                server=p.get("server", "{pod}"),
                role=role,
                url=p.get("url"),
                interval_s=interval,
                timeout_s=timeout,
                log_format=p.get("log_format", "cri"),
                gpus=p.get("gpus", "all"),
            )
        )
    return KubernetesConfig(
        pod_logs=k.get("pod_logs", DEFAULT_POD_LOGS), refresh_s=k.get("refresh", 30.0), pods=tuple(rules)
    )


def load_config(path: str) -> Config:
    """Read and validate a config file; raises ConfigError naming the file on any problem."""
    data = load_yaml(path)
    if data is None:
        data = {}
    return parse_config(data, path)


def default_config() -> Config:
    return Config(state_dir=os.path.expanduser(Config().state_dir))
