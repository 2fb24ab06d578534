"""Rogue processes on the same DDS domain as a run with authenticated messages: one with no key,
one with a stolen client key. Impersonation, forged updates, a forged Stop and command, junk
models, replays of recorded traffic and injections into a DDP collective all fail; the run ends
as a clean run with the same seed does, and the rejections are counted by reason. Each rogue has
the run's discovery tag (a stolen key file holds it; a keyless process can read it off a
participant announcement, where it travels in clear), without which it could not even match the
run's endpoints (test_discovery_tag.py)."""
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commlab.dds.auth import make_keyrings, write_keyring
from commlab.fl.run import build_configs, parse_args
from commlab.runs.roster import fl_identities, fl_roster

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]

ROGUE = r"""
import json, sys
import numpy as np
from commlab.dds import DdsNode, DdsSettings
from commlab.dds.auth import Keyring
from commlab.fl.messages import ClientUpdate, ModelBlob, Stop, TrainCmd
from commlab.codecs import get_codec
domain, name, run_id, stolen, tag = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
ring = None
if stolen != "-":  # client-1's pair key, used to sign as `name`
    doc = json.load(open(stolen))
    ring = Keyring(run_id, name, ("controller",), doc["discovery_tag"],
                   pair_keys={p: bytes.fromhex(k) for p, k in doc["pair_keys"].items()})
with DdsNode(name, DdsSettings(domain_id=domain, keyring=ring, discovery_tag=tag)) as node:
    pubs = {c: node.publisher(c) for c in (ClientUpdate, ModelBlob, Stop, TrainCmd)}
    node.barrier(set(), 10)  # announces `name`
    print("announced", flush=True)
    sys.stdin.readline()  # the test says when: the controller halted after round 1
    forged = get_codec("fp32").encode(np.full(1_663_370, -1e3, np.float32))
    pubs[ClientUpdate].publish(ClientUpdate(round=2, client_id="client-0", num_samples=10**9, payload=forged))
    pubs[TrainCmd].publish(TrainCmd(round=2, epochs=0, lr=1.0, subset_size=1, codec="fp32", run_id=run_id))
    pubs[ModelBlob].publish(ModelBlob(round=1, kind="full", digest="0" * 16, run_id=run_id, payload=b"junk"))
    pubs[Stop].publish(Stop(run_id=run_id, last_round=1))
    print("forged", flush=True)
    sys.stdin.readline()
"""

REPLAY = r"""
import sys, time
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from commlab.dds import DdsNode, DdsSettings
from commlab.dds.endpoints import chunk_topic
from commlab.dds.qos import lossless
with DdsNode("recorder", DdsSettings(domain_id=int(sys.argv[1]), discovery_tag=sys.argv[2])) as node:
    topic = chunk_topic(node, "ClientUpdate")
    reader = DataReader(node.participant, topic, qos=lossless(10))
    writer = DataWriter(node.participant, topic, qos=lossless(10))
    print("listening", flush=True)
    recorded = []
    while not recorded or recorded[-1].index + 1 < recorded[-1].count:  # client-0's round-1 update
        recorded += [s for s in reader.take(N=100) if s.sender == "client-0"]
        time.sleep(0.05)
    print("recorded", len(recorded), flush=True)
    sys.stdin.readline()
    for s in recorded:  # the same authenticated message again, under a new message id
        s.msg_id += 10**6
        writer.write(s)
    print("replayed", flush=True)
    sys.stdin.readline()
"""


class Proc:
    def __init__(self, argv: list[str], log: Path, halt: str | None = None, **extra_env: str):
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **extra_env}
        env.pop("COMMLAB_HALT_AT", None)
        if halt:
            env["COMMLAB_HALT_AT"] = halt
        self.log = log
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                                     env=env, text=True)

    def text(self) -> str:
        return self.log.read_text()

    def wait_for(self, *needles: str, timeout: float = 240) -> None:
        end = time.monotonic() + timeout
        while not all(n in self.text() for n in needles):
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{self.text()[-3000:]}"
            assert time.monotonic() < end, f"no {needles} within {timeout}s:\n{self.text()[-3000:]}"
            time.sleep(0.2)

    def say(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()


def fl_run(tmp_path: Path, domain: int, rogues: bool) -> dict:
    run_id = "rogue" if rogues else "clean"
    ctl, clients = build_configs(parse_args([
        "--codec", "fp32", "--clients", "2", "--rounds", "3", "--deadline", "120", "--samples-per-round", "200",
        "--batch-size", "32", "--train-subset", "2000", "--test-subset", "500", "--results-dir", str(tmp_path),
        "--run-id", run_id, "--domain-id", str(domain)]))
    rings = make_keyrings(run_id, [n.name for n in fl_roster(2)], trusted={"controller"}, identities=fl_identities(2))
    tag = rings["controller"].discovery_tag  # what the rogues read off the wire
    keys = tmp_path / f"keys-{run_id}"
    keys.mkdir(mode=0o700)
    argv = {}
    for node, cfg in zip(fl_roster(2), [ctl, *clients]):
        write_keyring(keys / f"{node.name}.key", rings[node.name])
        cfg["dds"]["key_file"] = str(keys / f"{node.name}.key")
        path = tmp_path / f"{run_id}-{node.name}.json"
        path.write_text(json.dumps(cfg))
        argv[node.name] = [sys.executable, str(ROOT / "nodes" / node.script), str(path)]
    procs: dict[str, Proc] = {}
    try:
        procs["controller"] = ctl_proc = Proc(argv["controller"], tmp_path / f"{run_id}-controller.log",
                                              halt="after_round@1" if rogues else None)
        if rogues:
            ctl_proc.wait_for("waiting for 2 client(s)")
            # No key (as client-1), client-1's stolen key signing as client-0, and as the controller.
            for name, claims, stolen in (("rogue-nokey", "client-1", "-"),
                                         ("rogue-stolen", "client-0", str(keys / "client-1.key")),
                                         ("rogue-controller", "controller", str(keys / "client-1.key"))):
                procs[name] = Proc([sys.executable, "-c", ROGUE, str(domain), claims, run_id, stolen, tag],
                                   tmp_path / f"attacker-{name}.log")
                procs[name].wait_for("announced")
            # Impersonation: the controller saw both clients announced, refused them, and waits on.
            ctl_proc.wait_for("announcement of 'client-1' rejected: unauthenticated",
                              "announcement of 'client-0' rejected: wrong_key")
            assert "sent the model of round 0" not in ctl_proc.text()
            procs["replay"] = Proc([sys.executable, "-c", REPLAY, str(domain), tag], tmp_path / "replay.log")
            procs["replay"].wait_for("listening")
        for name in ("client-0", "client-1"):
            procs[name] = Proc(argv[name], tmp_path / f"{run_id}-{name}.log")
        if rogues:
            ctl_proc.wait_for("HALTED at after_round@1")
            procs["replay"].wait_for("recorded")
            for name in ("rogue-nokey", "rogue-stolen", "rogue-controller", "replay"):
                procs[name].say()
                procs[name].wait_for("forged" if name != "replay" else "replayed")
            # Every forgery is rejected on arrival (reader threads run while the controller halts).
            ctl_proc.wait_for("replayed: 'client-0' sequence number", "from client-0 dropped: wrong_key",
                              "from client-1 dropped: unauthenticated")
            for topic in ("TrainCmd", "ModelBlob", "Stop"):
                procs["client-0"].wait_for(f"topic {topic}: unauthenticated chunk")
            ctl_proc.proc.send_signal(signal.SIGUSR1)
        for name in ("controller", "client-0", "client-1"):
            assert procs[name].proc.wait(300) == 0, procs[name].text()[-3000:]
    finally:
        for p in procs.values():
            if p.proc.poll() is None:
                p.proc.kill()
                p.proc.wait()
    run_dir = tmp_path / run_id
    return {"rows": list(csv.DictReader(open(run_dir / "rounds.csv"))), "run_dir": run_dir,
            "logs": {n: p.text() for n, p in procs.items()}}


def totals(run_dir: Path, node: str) -> dict:
    return json.loads((run_dir / f"transport-{node}.json").read_text())


def test_rogue_nodes_change_nothing_and_are_counted(tmp_path, claims):
    clean = fl_run(tmp_path, claims.take("domain"), rogues=False)
    attacked = fl_run(tmp_path, claims.take("domain"), rogues=True)
    assert [r["round"] for r in attacked["rows"]] == ["1", "2", "3"]
    assert all(r["participants"] == "client-0;client-1" for r in attacked["rows"])
    # Every forgery was dropped before it reached any node's logic: the same training, the same model.
    assert attacked["rows"][-1]["test_accuracy"] == clean["rows"][-1]["test_accuracy"]
    assert "epochs must be" not in attacked["logs"]["client-0"]
    ctl, c0 = totals(attacked["run_dir"], "controller"), totals(attacked["run_dir"], "client-0")
    assert ctl["auth_unauthenticated"] >= 2  # the keyless rogue's announcement and update
    assert ctl["auth_wrong_key"] >= 2        # client-1's key signing as client-0 (announcement, update)
    assert ctl["auth_replayed"] >= 1         # client-0's recorded update sent again
    assert c0["auth_wrong_key"] + c0["auth_unauthenticated"] >= 6  # forged commands, models, Stops
    assert sum(v for k, v in totals(clean["run_dir"], "controller").items() if k.startswith("auth_")) == 0


INJECT = r"""
import json, secrets, sys, time
import numpy as np
from commlab.dds import DdsNode, DdsSettings
from commlab.dds.auth import Keyring
from commlab.codecs import get_codec
from commlab.dds.endpoints import ChunkWriter
domain, keyed, tag = int(sys.argv[1]), sys.argv[2] == "keyed", sys.argv[3]
# keyed: a node of another run that has learnt this run's tag
ring = Keyring("another-run", "worker-1", ("worker-0",), tag, run_key=secrets.token_bytes(32)) if keyed else None
with DdsNode("worker-1", DdsSettings(domain_id=domain, keyring=ring, discovery_tag=tag)) as node:
    writer = ChunkWriter(node, "coll_ddp")
    while writer.writer.get_publication_matched_status().current_count < 1:  # rank 0's reader
        time.sleep(0.05)
    print("matched", flush=True)
    sys.stdin.readline()
    poison = get_codec("int8").encode(np.full(1_663_370, 1e30, np.float32))
    for step in range(3, 8):
        writer.write(json.dumps({"key": f"{step}/int8", "rank": 1}), poison)
    print("injected", flush=True)
    sys.stdin.readline()
"""


def ddp_run(tmp_path: Path, domain: int, rogues: bool) -> dict:
    run_id = "ddp-rogue" if rogues else "ddp-clean"
    cfg = json.loads((ROOT / "experiments" / "worker.conf.json").read_text())
    ring = make_keyrings(run_id, ["worker-0", "worker-1"], trusted={"worker-0", "worker-1"})["worker-0"]
    key = tmp_path / f"{run_id}.key"
    write_keyring(key, ring)
    cfg.update(results_dir=str(tmp_path), run_id=run_id, method="int8", method_params={}, summary_every=1000,
               dds={"domain_id": domain, "interface": "lo", "peers": ["127.0.0.1"], "key_file": str(key)},
               dataset={"name": "mnist", "train_subset": 640, "test_subset": 200}, collective_timeout_s=120.0)
    cfg["training"] = {**cfg["training"], "epochs": 1}
    path = tmp_path / f"{run_id}.json"
    path.write_text(json.dumps(cfg))
    procs = {}
    try:
        for r in (0, 1):
            procs[r] = Proc([sys.executable, str(ROOT / "nodes" / "worker.py"), str(path)], tmp_path / f"{run_id}-{r}.log",
                            halt="before_exchange@3" if rogues and r == 1 else None, WORLD="2", RANK=str(r))
        if rogues:
            procs[1].wait_for("HALTED at before_exchange@3")
            for keyed in ("plain", "keyed"):
                procs[keyed] = Proc([sys.executable, "-c", INJECT, str(domain), keyed, ring.discovery_tag],
                                    tmp_path / f"inject-{keyed}.log")
                procs[keyed].wait_for("matched")
                procs[keyed].say()
                procs[keyed].wait_for("injected")
            procs[0].wait_for("coll_ddp: unauthenticated chunk", "dropped: unauthenticated", "dropped: wrong_run")
            procs[1].proc.send_signal(signal.SIGUSR1)
        for r in (0, 1):
            assert procs[r].proc.wait(300) == 0, procs[r].text()[-3000:]
    finally:
        for p in procs.values():
            if p.proc.poll() is None:
                p.proc.kill()
                p.proc.wait()
    epochs = list(csv.DictReader(open(tmp_path / run_id / "epochs-rank0.csv")))
    return {"accuracy": epochs[-1]["test_accuracy"], "totals": totals(tmp_path / run_id, "worker-0")}


def test_injections_into_a_ddp_collective_are_dropped(tmp_path, claims):
    clean = ddp_run(tmp_path, claims.take("domain"), rogues=False)
    attacked = ddp_run(tmp_path, claims.take("domain"), rogues=True)
    assert attacked["accuracy"] == clean["accuracy"]
    assert attacked["totals"]["auth_unauthenticated"] >= 5 and attacked["totals"]["auth_wrong_run"] >= 5
