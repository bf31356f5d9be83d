"""`-o json|yaml` of the commands that read a running scheduler (explain, sources, decisions), as kubectl's -o:
the answer as the API gives it, for scripts; the default (`text`) is the table for humans."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

OUTPUTS = ("text", "json", "yaml")

__all__ = ["OUTPUTS", "output_flag", "print_as"]


def output_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="text",
                        help="text (default: tables for humans), json or yaml (the API's records, for scripts)")


def print_as(output: str, body: Any) -> None:
    """The body as JSON (indented, keys in the API's order) or YAML (block style, keys in the API's order)."""
    if output == "json":
        sys.stdout.write(json.dumps(body, indent=2, ensure_ascii=False) + "\n")
    elif output == "yaml":
        sys.stdout.write(yaml.safe_dump(body, sort_keys=False, default_flow_style=False, allow_unicode=True))
    else:
        raise ValueError(f"not a structured output: {output!r}")
