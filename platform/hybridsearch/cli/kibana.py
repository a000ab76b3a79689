"""``hsp kibana import|validate``: load the dashboards and data views into Kibana."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from hybridsearch import kibana
from hybridsearch.cli import AddCommand, subcommands, with_prefix
from hybridsearch.cli.output import stdout as console
from hybridsearch.cli.output import styled
from hybridsearch.errors import ConfigError
from hybridsearch.settings import Settings


def register(add: AddCommand) -> None:
    p = add("kibana", help="import the hybridsearch data views and dashboard into Kibana")
    action = subcommands(p, "kibana_command", "ACTION")
    imp = action("import", cmd_import, help="post the saved objects to Kibana (overwrites earlier copies)")
    imp.add_argument("--url", default="http://localhost:5601", help="Kibana URL (default %(default)s)")
    imp.add_argument("--prefix", default=None, help="index prefix the objects point at (default: HSP_INDEX__PREFIX)")
    imp.add_argument("--space", default=None, help="Kibana space id (default: the default space)")
    imp.add_argument("--file", type=Path, default=None,
                     help="NDJSON to import (default: ops/kibana/hybridsearch.ndjson)")
    imp.add_argument("--api-key", default=None, help="Kibana/Elasticsearch API key (default: HSP_ES__API_KEY)")
    imp.add_argument("--insecure", action="store_true", help="do not verify Kibana's TLS certificate")
    val = action("validate", cmd_validate, help="check the saved objects against our mappings, offline")
    val.add_argument("--file", type=Path, default=None)
    val.add_argument("--prefix", default=None)


def _prepared(args: argparse.Namespace, settings: Settings) -> tuple[Settings, list[dict[str, Any]]]:
    settings = with_prefix(settings, args.prefix)
    objects = kibana.rewrite_prefix(kibana.load_objects(args.file), settings.index.prefix)
    problems = kibana.validate(objects, settings)
    if problems:
        raise ConfigError("the saved objects do not fit our mappings: " + "; ".join(problems))
    return settings, objects


def cmd_validate(args: argparse.Namespace, settings: Settings) -> int:
    settings, objects = _prepared(args, settings)
    console.print(f"{len(objects)} saved objects fit the {settings.index.prefix} mappings")
    return 0


def cmd_import(args: argparse.Namespace, settings: Settings) -> int:
    settings, objects = _prepared(args, settings)
    api_key = args.api_key or (settings.es.api_key.get_secret_value() if settings.es.api_key else None)
    password = settings.es.password.get_secret_value() if settings.es.password else None
    answer = kibana.import_objects(args.url, objects, space=args.space, api_key=api_key,
                                   username=settings.es.username, password=password, verify=not args.insecure)
    console.print(styled(f"imported {answer.get('successCount', len(objects))} objects for prefix ",
                         (settings.index.prefix, "bold"), f": open {args.url.rstrip('/')}/app/dashboards and pick "
                         f"'hybridsearch ({settings.index.prefix})'"))
    return 0
