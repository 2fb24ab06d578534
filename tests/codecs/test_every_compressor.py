"""Every registered compressor in both modes, through the same code the nodes run (no processes):
an FL client's upload (memory, encode) decoded by the controller's collector, and a DDP step's
exchange (the allreduce of summable frames, PowerSGD's allreduces, or the allgather of frames) on
an in-process world of one."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from commlab.codecs import get_codec, names
from commlab.codecs.compression import build_compression
from commlab.ddp.train import build_exchange
from commlab.fl.collect import UpdateCollector
from commlab.models import build_model, flatten_grads, layout_of

# One concrete name per registered family: "minmax<bits>" -> "minmax4".
REGISTERED = [n.split("<")[0] + ("4" if "<" in n else "") for n in names()]


class WorldOfOne:
    world, rank = 1, 0

    def allgather(self, key, payload):
        return [bytes(payload)]

    def allreduce(self, key, vec, op="mean", codec=None):
        vec = np.array(vec, dtype=np.float32)
        return vec if codec is None else codec.decode(codec.encode(vec), vec.size)


def test_every_family_is_listed():
    assert {"fp32", "int8", "fp32_sparse", "int8_sparse", "minmax4", "qsgd4", "dgc", "signsgd", "terngrad",
            "powersgd4", "randomk"} <= set(REGISTERED)


@pytest.mark.parametrize("name", REGISTERED)
def test_fl_upload_is_decoded_by_the_controller(name):
    model = build_model("mnist_cnn")
    delta = (np.random.default_rng(0).standard_normal(1_663_370) * 1e-3).astype(np.float32)
    client = build_compression(name, {}, layout_of(model), seed=1)
    logs = []
    collector = UpdateCollector(1, ["client-0"], get_codec(name), delta.size, logs.append)
    payload = client.encode(delta)
    collector.offer(SimpleNamespace(round=1, client_id="client-0", num_samples=10, payload=payload))
    assert logs == [] and collector.replies.participants() == ["client-0"]
    assert len(payload) <= client.codec.wire_size(delta.size)  # at the density this round ran at (DGC warm-up)
    decoded = collector.replies.results[0].delta
    residual = getattr(client.memory, "residual", None)
    if residual is not None:  # error feedback: what was not sent is kept, nothing is lost
        assert np.allclose(decoded + residual, delta, atol=1e-6)


@pytest.mark.parametrize("name", REGISTERED)
def test_ddp_step_exchanges_and_sets_a_finite_gradient(tmp_path, name):
    from commlab.ddp.config import WorkerConfig
    cfg = WorkerConfig(run_id="x", results_dir=str(tmp_path), dds=None, method=name)
    model = build_model("mnist_cnn")
    x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
    torch.nn.functional.cross_entropy(model(x), y).backward()
    exchange = build_exchange(cfg, WorldOfOne(), model, steps_per_epoch=10)
    exchange.exchange(0)
    after = flatten_grads(model)
    assert np.isfinite(after).all() and np.abs(after).sum() > 0
    exchange.optimizer.step()  # the optimizer accepts what the exchange produced


def test_memory_follows_the_codec_kind():
    """Error feedback for biased lossy codecs only: an unbiased quantizer's error can exceed the
    vector, and fed back it grows (qsgd4 and terngrad diverged in FL with it)."""
    layout = layout_of(build_model("mnist_cnn"))
    kinds = {name: type(build_compression(name, {}, layout).memory).__name__ for name in REGISTERED}
    assert kinds["fp32"] == "NoMemory" and kinds["dgc"] == "DgcMemory"
    assert kinds["qsgd4"] == kinds["terngrad"] == "NoMemory"
    assert all(kinds[n] == "ErrorFeedback" for n in ("int8", "int8_sparse", "fp32_sparse", "minmax4", "signsgd",
                                                    "randomk", "powersgd4"))
