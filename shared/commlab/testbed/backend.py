"""Which backend runs an experiment: Docker containers when an engine answers, else local processes."""
from __future__ import annotations

from .engine import BOOTSTRAP, compose_answers, engine_answers

BACKENDS = ("auto", "docker", "local")


def choose_backend(requested: str) -> str:
    """"auto" -> "docker" when an engine (and compose v2) answers, else "local"; prints the choice and why."""
    if requested not in BACKENDS:
        raise ValueError(f"unknown backend {requested!r}; choose one of {', '.join(BACKENDS)}")
    if requested == "local":
        print("backend: local (requested)", flush=True)
        return "local"
    ok, detail = engine_answers()
    if ok and not compose_answers():
        ok, detail = False, "the engine answers but `docker compose` (v2) is missing"
    if requested == "docker":
        if not ok:
            raise RuntimeError(f"backend docker requested but unusable: {detail}; start one with {BOOTSTRAP}")
        print(f"backend: docker (requested; engine {detail})", flush=True)
        return "docker"
    choice = "docker" if ok else "local"
    why = f"Docker engine {detail} answers" if ok else f"no usable Docker engine: {detail}"
    print(f"backend: {choice} (auto: {why})", flush=True)
    return choice
