"""Two Docker engines on this machine and one swarm across them, for runs whose nodes must be on
different engines (root).

Each engine is a dockerd of its own (data root, exec root, pid file, socket, bridge) in a network
namespace of its own; a veth pair joins the namespaces (198.19.252.0/30), so swarm control,
gossip and VXLAN really go from one engine to the other, and never off the machine. The first
engine inits the swarm (the address pool of commlab.testbed.swarm), the second joins it as a
worker, and each node gets the label commlab.engine=<engine name>: a stack then spreads its
services over both (commlab.testbed.swarm.spread). There is no registry, so the node images are
copied from the default engine (`docker save`, `docker load` into each). Across engines an overlay
carries no multicast: DDS finds its peers by unicast (the stack's `dds.peers`, multicast off).

    python -m commlab.testbed.engine_pair up     # prints the DOCKER_HOST of the swarm's manager
    python -m commlab.testbed.engine_pair down   # stops what `up` started, by pid; removes it all

`down` (and leaving the EnginePair context, also on failure) stops the two dockerds (and their
containerd) by the pids `up` recorded, unmounts what they left, deletes their data and the
namespaces (the veth pair goes with them). Every address is in 198.18.0.0/15.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .engine import EngineError, docker
from .images import build_images, images_current, node_image
from .swarm import ENGINE_LABEL, init_args
from ..runs.roster import ROLES

STATE_ROOT = Path("/run/commlab-engine-pair")  # sockets, exec roots, pid files: small, gone at reboot
DATA_ROOT = Path("/var/lib/commlab-engine-pair")  # image layers (GBs): on disk, not in a tmpfs
STATE_FILE = STATE_ROOT / "state.json"
LINK_PREFIX = 30
ANSWER_S = 90.0
STOP_S = 30.0


@dataclass(frozen=True)
class Engine:
    name: str  # the node label's value and every name's suffix
    address: str  # on the veth pair; the swarm advertises it
    bip: str  # the engine's docker0
    local_pool: str  # its local networks (docker_gwbridge)

    @property
    def netns(self) -> str:
        return f"cl-engine-{self.name}"

    @property
    def link(self) -> str:
        return f"cl-engine-{self.name}"

    @property
    def exec_root(self) -> Path:
        return STATE_ROOT / self.name

    @property
    def data_root(self) -> Path:
        return DATA_ROOT / self.name

    @property
    def host(self) -> str:
        """The engine's DOCKER_HOST."""
        return f"unix://{self.exec_root}/docker.sock"

    @property
    def log(self) -> Path:
        return Path(f"/var/log/commlab-engine-{self.name}.log")


ENGINES = (Engine("a", "198.19.252.1", "198.19.32.1/24", "198.19.36.0/23"),
           Engine("b", "198.19.252.2", "198.19.33.1/24", "198.19.38.0/23"))


def dockerd_argv(engine: Engine) -> list[str]:
    """dockerd in the engine's namespace. nsenter, not `ip netns exec`: that mounts a fresh /sys,
    which hides the cgroup mounts ("Devices cgroup isn't mounted")."""
    return ["nsenter", f"--net=/run/netns/{engine.netns}", "dockerd", "--data-root", str(engine.data_root),
            "--exec-root", str(engine.exec_root), "--pidfile", str(engine.exec_root / "dockerd.pid"),
            "-H", engine.host, "--bip", engine.bip, "--default-address-pool", f"base={engine.local_pool},size=24"]


def link_commands(a: Engine, b: Engine) -> list[list[str]]:
    """The two namespaces and the veth pair between them."""
    cmds = [["ip", "netns", "add", a.netns], ["ip", "netns", "add", b.netns],
            ["ip", "link", "add", a.link, "type", "veth", "peer", "name", b.link]]
    for e in (a, b):
        cmds += [["ip", "link", "set", e.link, "netns", e.netns],
                 ["ip", "-n", e.netns, "addr", "add", f"{e.address}/{LINK_PREFIX}", "dev", e.link],
                 ["ip", "-n", e.netns, "link", "set", "lo", "up"], ["ip", "-n", e.netns, "link", "set", e.link, "up"]]
    return cmds


def on(engine: Engine, *args: str, **kw) -> subprocess.CompletedProcess:
    return docker("-H", engine.host, *args, **kw)


def _sh(cmd: list[str]) -> None:
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise EngineError(f"{' '.join(cmd)} failed: {out.stderr.strip()}")


class EnginePair:
    """`with EnginePair() as pair:` two engines in one swarm, `pair.manager.host` its DOCKER_HOST;
    everything is removed on leaving, whatever happened."""

    def __init__(self, engines: tuple[Engine, Engine] = ENGINES, log: Callable[[str], None] = print) -> None:
        self.engines, self.log = engines, log
        self.manager = engines[0]

    def __enter__(self) -> "EnginePair":
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> None:
        """Bring the pair up; whatever goes wrong after the check (also SIGTERM as SystemExit),
        what was made is taken down again before the error goes on. A pair that is up already
        (another run's) is refused and left alone."""
        if STATE_FILE.exists() or any(Path(f"/run/netns/{e.netns}").exists() for e in self.engines):
            raise EngineError(f"an engine pair is up already ({STATE_FILE}, netns {self.engines[0].netns}): "
                              "python -m commlab.testbed.engine_pair down")
        try:
            self._start()
        except BaseException:
            self.down()
            raise

    def _start(self) -> None:
        STATE_ROOT.mkdir(parents=True, exist_ok=True)
        STATE_FILE.write_text(json.dumps({"pids": {}}))  # from here on, `down` has something to undo
        for cmd in link_commands(*self.engines):
            _sh(cmd)
        pids = {}
        for e in self.engines:
            e.exec_root.mkdir(parents=True, exist_ok=True)
            with open(e.log, "ab") as log:
                pids[e.name] = subprocess.Popen(dockerd_argv(e), stdout=log, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, start_new_session=True).pid
            STATE_FILE.write_text(json.dumps({"pids": pids}))
        for e in self.engines:
            self._wait_answers(e, pids[e.name])
        self._make_swarm()
        if not images_current():  # on the default engine, which the images are copied from
            build_images()
        self._copy_images()

    def _wait_answers(self, e: Engine, pid: int) -> None:
        deadline = time.monotonic() + ANSWER_S
        while on(e, "info", "--format", "{{.ServerVersion}}", check=False).returncode != 0:
            if not _alive(pid):
                raise EngineError(f"dockerd of engine {e.name} exited: {_tail(e.log)}")
            if time.monotonic() > deadline:
                raise EngineError(f"dockerd of engine {e.name} did not answer within {ANSWER_S:.0f} s (log {e.log})")
            time.sleep(1.0)
        self.log(f"engine pair: engine {e.name} answers (dockerd pid {pid}, namespace {e.netns}, {e.address})")

    def _make_swarm(self) -> None:
        manager, worker = self.engines
        on(manager, *init_args(manager.address), timeout_s=120)
        token = on(manager, "swarm", "join-token", "-q", "worker").stdout.decode().strip()
        on(worker, "swarm", "join", "--token", token, "--advertise-addr", worker.address,
           "--listen-addr", f"{worker.address}:2377", f"{manager.address}:2377", timeout_s=120)
        for e in self.engines:
            node_id = on(e, "info", "--format", "{{.Swarm.NodeID}}").stdout.decode().strip()
            on(manager, "node", "update", "--label-add", f"{ENGINE_LABEL}={e.name}", node_id)
        self.log(f"engine pair: swarm of {len(self.engines)} engines, manager {manager.name} ({manager.address})")

    def _copy_images(self) -> None:
        """The node images of the default engine, into both (no registry to pull from): one `docker
        save` streamed into a `docker load` on each engine, no copy on disk; if this process dies,
        the pipes break and all three end."""
        images = [node_image(role) for role in ROLES]
        t0 = time.monotonic()
        save = subprocess.Popen(["docker", "save", *images], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        loads = [subprocess.Popen(["docker", "-H", e.host, "load", "-q"], stdin=subprocess.PIPE,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for e in self.engines]
        assert save.stdout is not None
        try:
            while chunk := save.stdout.read(1 << 20):
                for load in loads:
                    assert load.stdin is not None
                    load.stdin.write(chunk)
            for load in loads:
                assert load.stdin is not None
                load.stdin.close()
        except BrokenPipeError:
            pass  # a load that ended early: its error is reported below
        except BaseException:  # interrupted: none of the three outlives this
            for proc in (save, *loads):
                proc.kill()
            raise
        finally:
            save.stdout.close()
        for what, proc in [("docker save", save), *((f"docker load into engine {e.name}", load)
                                                    for e, load in zip(self.engines, loads))]:
            err = proc.stderr.read() if proc.stderr else b""  # stdin already closed: no communicate()
            if proc.wait(timeout=600) != 0:
                raise EngineError(f"{what} failed: {err.decode(errors='replace').strip()}")
        self.log(f"engine pair: {', '.join(images)} copied into both engines in {time.monotonic() - t0:.0f} s")

    def down(self) -> None:
        down(self.engines, self.log)


def down(engines: tuple[Engine, ...] = ENGINES, log: Callable[[str], None] = print) -> None:
    """Undo `up` as far as it got: swarm left, dockerds (and their containerd) stopped by the pids
    recorded, mounts and data removed, namespaces (with the veth pair) deleted."""
    pids = json.loads(STATE_FILE.read_text())["pids"] if STATE_FILE.exists() else {}
    for e in reversed(engines):  # the worker first, then the manager
        if e.name in pids and _alive(pids[e.name]):
            try:
                on(e, "swarm", "leave", "--force", check=False, timeout_s=60)
            except subprocess.TimeoutExpired:
                log(f"engine pair: engine {e.name} did not leave the swarm within 60 s; stopping it")
    for e in engines:
        # dockerd, then its containerd and any shim left: each started for this engine alone, so
        # each names the engine's own exec root on its command line.
        for pid in (pids.get(e.name), _read_pid(e.exec_root / "containerd" / "containerd.pid"), *_shims(e)):
            if pid is not None and _alive(pid) and str(e.exec_root) in _cmdline(pid):
                _stop(pid)
        _unmount_under(e.exec_root, e.data_root)
        subprocess.run(["ip", "netns", "del", e.netns], capture_output=True)
    subprocess.run(["ip", "link", "del", engines[0].link], capture_output=True)  # if up stopped before moving it
    # GBs of image layers in many small files: both engines' at once (minutes each on a loaded disk)
    removals = [subprocess.Popen(["rm", "-rf", str(e.exec_root), str(e.data_root)]) for e in engines]
    for removal in removals:
        removal.wait()
    STATE_FILE.unlink(missing_ok=True)
    for folder in (STATE_ROOT, DATA_ROOT):
        shutil.rmtree(folder, ignore_errors=True)
    log("engine pair: down (engines stopped, namespaces, link and data removed)")


def _alive(pid: int) -> bool:
    try:  # reap it if it is our child (an `up` in this process): a zombie still answers kill(0)
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _shims(e: Engine) -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
            and _cmdline(int(p.name)).startswith("containerd-shim") and str(e.exec_root) in _cmdline(int(p.name))]


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _stop(pid: int) -> None:
    """SIGTERM (dockerd then stops its containers and containerd), SIGKILL after STOP_S."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_S
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    if _alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _unmount_under(*roots: Path) -> None:
    """Lazily unmount whatever a stopped dockerd left mounted below `roots`, deepest first."""
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for point in sorted((p for p in points if any(p == str(r) or p.startswith(f"{r}/") for r in roots)),
                        key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


def main(argv: list[str]) -> int:
    if argv == ["up"]:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped `up` undoes itself too
        pair = EnginePair()
        try:
            pair.up()
        except (EngineError, OSError, subprocess.TimeoutExpired) as e:
            print(f"engine pair: up failed: {str(e).splitlines()[0]}", file=sys.stderr)
            return 1
        print(f"DOCKER_HOST={pair.manager.host}")
        return 0
    if argv == ["down"]:
        down()
        return 0
    print("usage: python -m commlab.testbed.engine_pair up|down   (root)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
