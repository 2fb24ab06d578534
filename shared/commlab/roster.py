"""The nodes of one run: their names, which node program each runs and its extra environment.

An FL run is `controller` plus `client-0` .. `client-<N-1>`; a DDP run is `worker-0` ..
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


def worker_name(rank: int) -> str:
    return f"worker-{rank}"


def fl_roster(clients: int) -> list[Node]:
    """The controller first (the node whose end ends the run), then the clients by index."""
    return [Node(CONTROLLER, "controller")] + [Node(client_name(i), "client") for i in range(clients)]


def ddp_roster(world: int) -> list[Node]:
    """The workers by rank (rank 0 first: it ends the run)."""
    return [Node(worker_name(r), "worker", (("RANK", str(r)), ("WORLD", str(world)))) for r in range(world)]
