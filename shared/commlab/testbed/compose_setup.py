"""The `setup` service of the static compose files: make one run's node configs, then exit.

A plain `docker compose up` cannot compute a fresh run id or per-node configs, so the first
service does it, with the same builders as the launchers, into /results/<run-id>/configs/ and
into the shared volume /lab/ that the node services read their configs from. It sits beside the
launchers (it uses theirs and the testbed's code), so the testbed never imports a launcher.

    python -m commlab.testbed.compose_setup fl  [launcher flags, e.g. --codec int8_sparse]
    python -m commlab.testbed.compose_setup ddp [launcher flags]
Environment: COMPOSE_NET (198.19.<net>.0/24, as in the compose file), LINK_PROFILE.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from commlab.dds.auth import make_keyrings, write_keyring
from commlab.output.run_folder import write_json_atomic
from commlab.runs.keys import with_key_file
from commlab.runs.roster import CONTROLLER, Node, ddp_roster, fl_identities_of, fl_roster_of
from commlab.testbed.compose_file import CONTAINER_RESULTS, addresses, container_config

LAB = Path("/lab")


def fl_configs(flags: list[str]) -> tuple[list[Node], list[dict[str, Any]]]:
    from commlab.fl.run import build_configs, parse_args
    controller, clients = build_configs(parse_args([*flags, "--results-dir", CONTAINER_RESULTS]))
    return fl_roster_of(clients), [controller, *clients]


def ddp_configs(flags: list[str]) -> tuple[list[Node], list[dict[str, Any]]]:
    from commlab.ddp.run import build_config, parse_args
    args = parse_args([*flags, "--results-dir", CONTAINER_RESULTS])
    cfg = build_config(args)  # every rank reads the same config; RANK/WORLD come from the compose file
    return ddp_roster(args.world), [cfg] * args.world


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("fl", "ddp"):
        print("usage: python -m commlab.testbed.compose_setup fl|ddp [launcher flags]", file=sys.stderr)
        return 2
    nodes, cfgs = (fl_configs if argv[0] == "fl" else ddp_configs)(argv[1:])
    addrs = addresses(nodes, int(os.environ.get("COMPOSE_NET", "100")))
    profile = os.environ.get("LINK_PROFILE", "10mbit")
    run_dir = Path(CONTAINER_RESULTS) / cfgs[0]["run_id"]
    # Keys in the setup volume, not the results: every node of this project mounts that volume,
    # so here (unlike the launchers' per-node compose secrets) a node could read another's key.
    trusted = {n.name for n in nodes} if argv[0] == "ddp" else {CONTROLLER}
    keys = LAB / "keys"
    keys.mkdir(mode=0o700, parents=True, exist_ok=True)
    identities = fl_identities_of(cfgs[1:]) if argv[0] == "fl" else None
    rings = make_keyrings(cfgs[0]["run_id"], [n.name for n in nodes], trusted, identities)
    for node, cfg in zip(nodes, cfgs):
        (keys / f"{node.name}.key").unlink(missing_ok=True)  # a previous run's key
        write_keyring(keys / f"{node.name}.key", rings[node.name])
        cfg = container_config(with_key_file(cfg, keys / f"{node.name}.key"), node.name, addrs, profile,
                               Path(CONTAINER_RESULTS))
        cfg["dds"]["key_file"] = str(keys / f"{node.name}.key")
        for folder in (run_dir / "configs", LAB):
            folder.mkdir(parents=True, exist_ok=True)
            write_json_atomic(folder / f"{node.name}.json", cfg)
    print(f"setup: run {cfgs[0]['run_id']}: {len(nodes)} nodes, link profile {profile}; results in "
          f"results/{cfgs[0]['run_id']}/", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
