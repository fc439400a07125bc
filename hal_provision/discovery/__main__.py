"""`python3 -m hal_provision.discovery [--records DIR] [--json] [--name NAME]`: this node's
hardware profile (or a records directory's) in cluster.yml's shape. Standard library only, so
it runs on a bare node; comparing with a model is `hal-provision discover`.

Exit codes: 0 printed; 2 unusable input (a missing records directory, a malformed record).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from pathlib import Path

from . import DiscoveryError, discover, profile_name, read_live, read_records, to_json, to_yaml


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m hal_provision.discovery", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=Path, help="read a records directory instead of this machine")
    parser.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    parser.add_argument("--name", help="the profile's key (default: the host name, or the records directory's name)")
    args = parser.parse_args(argv)
    try:
        sources = read_records(args.records) if args.records else read_live()
        found = discover(sources)
    except DiscoveryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    name = profile_name(args.name or (args.records.resolve().name if args.records else socket.gethostname()))
    if args.json:
        print(json.dumps(to_json(found, name), indent=2))
    else:
        sys.stdout.write(to_yaml(found, name, f"{name}: hardware read from {found.origin}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
