"""A keyless process that has the run's discovery tag (read off a participant announcement, where it
travels in clear; without it, it would receive nothing: test_discovery_tag.py) and only listens on
the domain of a real FL run captures every chunk of the model broadcasts and the updates, and finds
none of their plaintext: neither a slice of the model
the controller broadcast (from its checkpoint) nor the frame header every fp32 update starts with."""
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from commlab.codecs.fp32 import Fp32
from commlab.dds.auth import make_keyrings, write_keyring
from commlab.fl.checkpoint import load_checkpoint
from commlab.fl.run import build_configs, parse_args
from commlab.runs.roster import fl_identities, fl_roster
from commlab.testbed.node_procs import NodeProcess

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
TOPICS = ("ModelBlob", "ClientUpdate")

LISTENER = r"""
import os, sys, time
from cyclonedds.sub import DataReader
from commlab.dds import DdsNode, DdsSettings
from commlab.dds.chunk import Chunk
from commlab.dds.endpoints import chunk_topic
from commlab.dds.qos import lossless
domain, out, tag = int(sys.argv[1]), sys.argv[2], sys.argv[3]
with DdsNode("listener", DdsSettings(domain_id=domain, discovery_tag=tag)) as node:
    readers = {t: DataReader(node.participant, chunk_topic(node, t), qos=lossless(10)) for t in sys.argv[4:]}
    print("listening", flush=True)
    captured = {t: [] for t in readers}
    end = time.monotonic() + 900
    while time.monotonic() < end and not os.path.exists(f"{out}/stop"):  # the test: the run is over
        for t, r in readers.items():
            captured[t] += [bytes(s.payload) for s in r.take(N=100) if isinstance(s, Chunk)]
        time.sleep(0.05)
    for t, r in readers.items():
        captured[t] += [bytes(s.payload) for s in r.take(N=1000) if isinstance(s, Chunk)]
        with open(f"{out}/{t}.bin", "wb") as f:
            f.write(b"".join(captured[t]))
    print("captured", {t: len(c) for t, c in captured.items()}, flush=True)
"""


def test_a_passive_listener_sees_no_plaintext(tmp_path, domain):
    run_id = "listened"
    ctl, clients = build_configs(parse_args([
        "--codec", "fp32", "--clients", "2", "--rounds", "2", "--deadline", "120", "--samples-per-round", "128",
        "--batch-size", "32", "--train-subset", "2000", "--test-subset", "300", "--results-dir", str(tmp_path),
        "--run-id", run_id, "--domain-id", str(domain)]))
    rings = make_keyrings(run_id, [n.name for n in fl_roster(2)], trusted={"controller"}, identities=fl_identities(2))
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    listener = NodeProcess(tmp_path, "listener", [sys.executable, "-c", LISTENER, str(domain), str(tmp_path),
                                                  rings["controller"].discovery_tag, *TOPICS])
    procs = [listener]
    try:
        listener.wait_for("listening", 120)
        for node, cfg in zip(fl_roster(2), [ctl, *clients]):
            write_keyring(keys / f"{node.name}.key", rings[node.name])
            cfg["dds"]["key_file"] = str(keys / f"{node.name}.key")  # encrypted by default
            path = tmp_path / f"{node.name}.json"
            path.write_text(json.dumps(cfg))
            procs.append(NodeProcess(tmp_path, node.name, [sys.executable, str(ROOT / "nodes" / node.script), str(path)]))
        for p in procs[1:]:
            assert p.finish(600) == 0, p.text()[-3000:]
        (tmp_path / "stop").touch()
        listener.wait_for("captured", 120)
    finally:
        for p in procs:
            p.stop()
    model = load_checkpoint(Path(ctl["checkpoint_dir"])).weights  # the last model broadcast
    blobs, updates = ((tmp_path / f"{t}.bin").read_bytes() for t in TOPICS)
    assert len(blobs) >= 3 * model.nbytes  # rounds 0, 1 and 2 broadcast, every byte captured
    assert len(updates) >= 4 * model.nbytes  # two fp32 updates in each of two rounds
    for at in range(0, model.size - 16, model.size // 7):
        assert model[at:at + 16].tobytes() not in blobs
    # What every fp32 frame of this model starts with, whatever its values.
    header = os.path.commonprefix([bytes(Fp32().encode(np.full(model.size, v, np.float32))) for v in (0.0, 1.0)])
    assert len(header) >= 16 and header not in updates and header not in blobs
