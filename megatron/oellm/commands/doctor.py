"""``oellm doctor [--json]``: report versions and GPUs, flag known-bad combinations; exit 1 on any error."""

from __future__ import annotations

import argparse
import json
import os

from megatron.oellm.doctor import check_environment, collect_environment, exit_status, format_text, to_json

HELP = "check this environment: versions, GPUs and known-bad combinations (exit 1 on errors)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``oellm doctor``."""
    parser.add_argument("--json", action="store_true", help="print one JSON object {versions, paths, gpus, findings, ok}")


def run(args: argparse.Namespace) -> int:
    """Collect the environment, run every rule against ``os.environ``, print the report, return the exit status."""
    report = collect_environment()
    findings = check_environment(report, os.environ)
    print(json.dumps(to_json(report, findings), indent=2) if args.json else format_text(report, findings))
    return exit_status(findings)
