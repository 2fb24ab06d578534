"""The nodes of one run: their names, which node program each runs and its extra environment.

An FL run is `controller` plus `client-0` .. `client-<N-1>`, or, with P processes hosting the N
clients (logical clients), `controller` plus `clients-0` .. `clients-<P-1>`, process k hosting
clients k, k+P, k+2P, ...; a DDP run is `worker-0` ..
`worker-<W-1>`, each with RANK and WORLD in its environment. The launchers, every backend (local
processes, network namespaces, containers) and the compose setup take their nodes from here, and
the nodes name themselves (DDS participant, barrier peers) with the same functions.
"""
from __future__ import annotations

from dataclasses import dataclass

ROLES = ("controller", "client", "worker")  # node programs nodes/<role>.py, images commlab-<role>
CONTROLLER = "controller"  # node name of the FL controller


@dataclass(frozen=True)
class Node:
    name: str                      # service, host and DDS participant name: controller, client-0, worker-1
    role: str                      # controller | client | worker
    env: tuple[tuple[str, str], ...] = ()  # extra environment, e.g. RANK/WORLD for workers

    @property
    def script(self) -> str:
        """The node program under nodes/."""
        return f"{self.role}.py"


def client_name(index: int) -> str:
    """DDS participant / barrier name of client `index`."""
    return f"client-{index}"


def client_host_name(index: int) -> str:
    """DDS participant / barrier name of client process `index` when processes host several clients."""
    return f"clients-{index}"


def hosted_clients(host: int, clients: int, procs: int) -> list[int]:
    """The client indices process `host` of `procs` hosts (round robin: every process within one)."""
    return list(range(host, clients, procs))


def client_node(index: int, procs: int | None) -> str:
    """The node client `index` speaks through: itself, or the process hosting it."""
    return client_name(index) if procs is None else client_host_name(index % procs)


def fl_identities(clients: int, procs: int | None = None) -> dict[str, list[str]]:
    """Each client process -> the clients it speaks for (their updates are signed with their own keys)."""
    spoken: dict[str, list[str]] = {}
    for i in range(clients):
        spoken.setdefault(client_node(i, procs), []).append(client_name(i))
    return spoken


def worker_name(rank: int) -> str:
    return f"worker-{rank}"


def fl_roster(clients: int, procs: int | None = None) -> list[Node]:
    """The controller first (the node whose end ends the run), then the client processes by index:
    one per client, or `procs` hosting them all."""
    names = [client_name(i) for i in range(clients)] if procs is None else [client_host_name(k) for k in range(procs)]
    return [Node(CONTROLLER, "controller")] + [Node(name, "client") for name in names]


def fl_roster_of(client_cfgs: list[dict]) -> list[Node]:
    """fl_roster for these client process configs (each names its client, or its host index and procs)."""
    return fl_roster(*_clients_and_procs(client_cfgs))


def fl_identities_of(client_cfgs: list[dict]) -> dict[str, list[str]]:
    """fl_identities for these client process configs."""
    return fl_identities(*_clients_and_procs(client_cfgs))


def _clients_and_procs(client_cfgs: list[dict]) -> tuple[int, int | None]:
    procs = client_cfgs[0].get("procs") if client_cfgs else None
    return (len(client_cfgs), None) if procs is None else (client_cfgs[0]["num_clients"], procs)


def ddp_roster(world: int) -> list[Node]:
    """The workers by rank (rank 0 first: it ends the run)."""
    return [Node(worker_name(r), "worker", (("RANK", str(r)), ("WORLD", str(world)))) for r in range(world)]
