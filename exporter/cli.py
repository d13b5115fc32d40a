"""The `vllm-headroom` command line: serve, triage, check-config, generate, report, demo."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from exporter import __version__

EXIT_OK, EXIT_FOUND, EXIT_BAD_INPUT = 0, 1, 2


def _problems(exc) -> int:
    """Print every problem of a ConfigError, one a line; the exit code for bad input."""
    for problem in exc.problems:
        print(problem, file=sys.stderr)
    return EXIT_BAD_INPUT


def _cmd_triage(args: argparse.Namespace) -> int:
    from exporter.triage import UnreadableInput, render_text, triage_path

    found = False
    failed = False
    for path in args.logs:
        try:
            report = triage_path(path, args.format)
        except UnreadableInput as exc:
            print(f"vllm-headroom triage: {exc}", file=sys.stderr)
            failed = True
            continue
        found |= report["first_oom"] is not None
        if args.json:
            sys.stdout.write(json.dumps(report, ensure_ascii=False) + "\n")
        else:
            sys.stdout.write(render_text(report) + "\n")
        sys.stdout.flush()
    if failed:
        return EXIT_BAD_INPUT
    return EXIT_FOUND if found else EXIT_OK


def _cmd_check_config(args: argparse.Namespace) -> int:
    from exporter.config import ConfigError, load_config

    try:
        cfg = load_config(args.file)
        if cfg.web_config_file:  # what `serve` would refuse at start is refused here too
            from exporter.webconfig import load_web_config

            load_web_config(cfg.web_config_file)
    except ConfigError as exc:
        _problems(exc)
        print(f"{args.file}: {len(exc.problems)} problem(s); nothing was started", file=sys.stderr)
        return EXIT_BAD_INPUT
    logs = sum(1 for s in cfg.servers if s.log)
    k8s = cfg.kubernetes
    found = (
        f", {len(k8s.pods)} pod rule(s) over {k8s.pod_logs} (re-read every {k8s.refresh_s:g}s)"
        if k8s is not None
        else ""
    )
    print(
        f"{args.file}: OK: {len(cfg.servers)} server(s), {logs} log(s){found}, GPU backend {cfg.gpu.backend}, "
        f"listening on {cfg.listen_address}"
    )
    if k8s is not None and os.path.isdir(k8s.pod_logs):  # what this node would watch now
        from exporter.discovery import discover

        for sc in discover(k8s):
            print(f"  {sc.name} (role {sc.role}): {sc.safe_url}; log {sc.log.path if sc.log else '-'}")
    return EXIT_OK


def _cmd_serve(args: argparse.Namespace) -> int:
    from exporter.config import ConfigError, default_config, load_config

    try:
        cfg = load_config(args.config) if args.config else default_config()
    except ConfigError as exc:
        return _problems(exc)
    if args.listen_address:
        from dataclasses import replace

        from exporter.config import check_listen_address

        address = args.listen_address
        try:
            cfg = replace(cfg, listen_address=check_listen_address(address))
        except ValueError as exc:
            print(f"vllm-headroom serve: --web.listen-address {address!r}: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if args.web_config_file:
        from dataclasses import replace

        cfg = replace(cfg, web_config_file=args.web_config_file)
    try:
        from exporter.daemon import run
    except ImportError as exc:  # the daemon's own dependencies are missing
        print(f"vllm-headroom serve: cannot start: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return run(cfg)


def _cmd_generate(args: argparse.Namespace) -> int:
    from exporter.config import ConfigError
    from exporter.generate import write_outputs
    from exporter.generate.thresholds import load_thresholds

    try:
        thresholds = load_thresholds(args.thresholds)
    except ConfigError as exc:
        return _problems(exc)
    written = write_outputs(thresholds, args.out)
    print(f"wrote {len(written)} files under {args.out}: " + ", ".join(sorted({w.split("/")[0] for w in written})))
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    from exporter.demo import run
    from exporter.simulate.scenario import ScenarioError

    try:
        return run(args.port, args.scenario or None, args.workdir)
    except ScenarioError as exc:
        print(f"vllm-headroom demo: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _cmd_report(args: argparse.Namespace) -> int:
    import os
    import time

    from exporter.config import ConfigError
    from exporter.generate.thresholds import load_thresholds
    from exporter.promapi import PrometheusAPI, PrometheusError
    from exporter.report import collect, parse_since, render_html
    from exporter.report_needs import missing

    try:
        import matplotlib  # noqa: F401  the plots' library, the `report` extra
    except ImportError:
        print(
            "vllm-headroom report: the report's plots need matplotlib, which is not installed: "
            "pip install 'vllm-headroom[report]' (make run and make test install it)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT

    try:
        since = parse_since(args.since)
    except ValueError as exc:
        print(f"vllm-headroom report: --since: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        thresholds = load_thresholds(args.thresholds)  # the same file the rules were generated from
    except ConfigError as exc:
        return _problems(exc)
    prom = PrometheusAPI(args.prometheus)
    end = args.end or time.time()
    try:
        problems = missing(prom, since, end)
        if problems:
            for problem in problems:
                print(f"vllm-headroom report: {problem}", file=sys.stderr)
            print(f"vllm-headroom report: nothing written to {args.out}", file=sys.stderr)
            return EXIT_BAD_INPUT
        data = collect(prom, since, end, thresholds)
    except PrometheusError as exc:
        print(f"vllm-headroom report: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(render_html(data, thresholds))
    json_path = args.json or os.path.splitext(args.out)[0] + ".json"
    with open(json_path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)
    print(f"wrote {args.out} and {json_path}: {len(data['servers'])} server(s)")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """The parser; `parser.commands` maps each command to its own parser (for its usage in errors)."""
    parser = argparse.ArgumentParser(prog="vllm-headroom", description=__doc__)
    parser.add_argument("--version", action="version", version=f"vllm-headroom {__version__}")
    parser.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("serve", help="run the exporter daemon")
    p.add_argument("--config", help="YAML config file (default: one vLLM at 127.0.0.1:8000, GPUs auto-detected)")
    p.add_argument("--web.listen-address", dest="listen_address", help="override listen_address, e.g. :9478")
    p.add_argument(
        "--web.config.file",
        dest="web_config_file",
        help="TLS and basic auth, in the exporter-toolkit web config format",
    )
    p.set_defaults(func=_cmd_serve)

    p = sub.add_parser(
        "triage",
        help="find the first memory failure in vLLM logs and say what to do next",
        description="Exit codes: 0 no memory failure, 1 memory failure found, 2 unreadable input.",
    )
    p.add_argument(
        "logs",
        nargs="+",
        metavar="LOG",
        help="vLLM log file (plain, CRI or docker json; gzip-compressed too), or - for stdin",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per file, one per line (JSON Lines when several files are given)",
    )
    p.add_argument(
        "--format",
        default="auto",
        choices=("auto", "plain", "cri", "docker"),
        help="line format (default: detected per file)",
    )
    p.set_defaults(func=_cmd_triage)

    p = sub.add_parser("check-config", help="validate a config file")
    p.add_argument("file", help="the YAML config file `serve --config` would read")
    p.set_defaults(func=_cmd_check_config)

    p = sub.add_parser("generate", help="write dashboards, alert and recording rules, tests and runbooks")
    p.add_argument("--thresholds", help="YAML overriding the embedded default thresholds")
    p.add_argument("--out", default=".", help="directory to write alerts/, dashboards/, docs/runbooks/ into")
    p.set_defaults(func=_cmd_generate)

    p = sub.add_parser(
        "report",
        help="the weekly capacity review as HTML and JSON, from Prometheus",
        description="Reads vllm-headroom's series and its recording and weekly rules' series from "
        "Prometheus. Exit codes: 0 written; 2 bad arguments, Prometheus unreachable, or missing "
        "what the report needs (named; nothing is written).",
    )
    p.add_argument("--prometheus", required=True, help="Prometheus base URL, e.g. http://prometheus:9090")
    p.add_argument("--since", default="7d", help="how far back (default 7d)")
    p.add_argument("--out", default="report.html", help="where the HTML page goes (default report.html)")
    p.add_argument("--json", help="where the JSON goes (default: beside --out)")
    p.add_argument("--thresholds", help="the thresholds file the rules were generated from (default: built in)")
    p.add_argument("--end", type=float, help=argparse.SUPPRESS)  # Unix time; tests and re-runs of a past week
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser("demo", help="simulated vLLM servers and the daemon on 127.0.0.1, for a first look")
    p.add_argument("--port", type=int, default=9478, help="the exporter's port (default 9478)")
    p.add_argument("--scenario", action="append", help="a built-in scenario or a YAML file; repeat for several")
    p.add_argument("--workdir", help="where the simulated logs go (default: a new temporary directory)")
    p.set_defaults(func=_cmd_demo)
    parser.set_defaults(commands=dict(sub.choices))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # argparse would show the top-level usage even when the mistake is in the command's flags
        words = sys.argv[1:] if argv is None else argv
        before = words[: words.index(args.command)] if args.command in words else []
        where = parser if any(word in before for word in extra) else args.commands[args.command]
        where.error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `triage ... | head`
        return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
