"""FL node configs: the typed schema of controller.conf.json and client.conf.json.

`load_controller_config(path)` / `load_client_config(path)` read and validate a JSON file and
raise ConfigError (naming the key or file) before anything is trained or written.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from commlab.config.schema import ConfigError, DdsNodeConfig, NamedSection, existing, load_config, positive, to_dict
from commlab.config.train_step_spec import DEFAULT_TRAIN_STEP, check_train_step
from commlab.data import Dataset, partition_dataset
from commlab.data.partition import SCHEMES as PARTITION_SCHEMES, scheme_params
from commlab.dds.messages import MAX_TEXT
from commlab.fl.adaptive.bits import takes_bits
from commlab.fl.adaptive.section import AdaptiveSection
from commlab.fl.sampling import Availability, load_availability, per_round_count
from commlab.fl.strategy_config import StrategySection
from commlab.privacy.config import PrivacySection
from commlab.privacy.secagg_config import SecAggSection
from commlab.runs.roster import client_host_name, client_name, client_node, fl_roster, hosted_clients

# BatchNorm's running statistics (docs/workloads.md): "aggregate" sends them with the weights and
# the strategy averages them like any weight (the evaluated model is the average of what the
# clients hold); "local" keeps them on the clients, and the controller recomputes the global
# model's statistics from training samples before each evaluation. Models without BatchNorm: no effect.
BATCHNORM = ("aggregate", "local")


def check_batchnorm(where: str, value: str) -> None:
    if value not in BATCHNORM:
        raise ConfigError(f"{where}batchnorm: must be one of {', '.join(BATCHNORM)}, got {value!r}")


@dataclass(frozen=True)
class PartitionSection:
    """The clients' shares of the training set (commlab.data.partition, docs/workloads.md)."""
    scheme: str = "dirichlet"
    alpha: float = 0.5            # dirichlet concentration
    labels_per_client: int = 2    # shards, label_quantity
    exponent: float = 1.0         # quantity: client shares follow k^-exponent

    def check(self, where: str) -> None:
        if self.scheme not in PARTITION_SCHEMES:
            raise ConfigError(f"{where}scheme: unknown partition scheme {self.scheme!r} "
                              f"(known: {', '.join(PARTITION_SCHEMES)})")
        positive(where, alpha=self.alpha, labels_per_client=self.labels_per_client)
        if self.exponent < 0:
            raise ConfigError(f"{where}exponent: must be >= 0, got {self.exponent}")

    def params(self) -> dict[str, Any]:
        """Keyword arguments for commlab.data.partition for this scheme."""
        return scheme_params(self.scheme, alpha=self.alpha, labels_per_client=self.labels_per_client,
                             exponent=self.exponent)

    def split(self, data: Dataset, num_clients: int, seed: int) -> list[np.ndarray]:
        """Every client's training sample indices (the same in every process for the same seed,
        SeedTree.partition)."""
        return partition_dataset(data, num_clients, self.scheme, seed, **self.params())


@dataclass(frozen=True)
class CodecSection(NamedSection):
    name: str = "fp32"


@dataclass(frozen=True)
class TrainingSection:
    local_epochs: int = 1
    batch_size: int = 64
    lr: float = 0.05
    samples_per_round: int = 6000  # per client and round, drawn from its partition
    lr_decay: float = 1.0  # round r trains at lr * lr_decay**(r - 1); 1: the same lr every round

    def check(self, where: str) -> None:
        positive(where, local_epochs=self.local_epochs, batch_size=self.batch_size, lr=self.lr,
                  samples_per_round=self.samples_per_round)
        if not 0 < self.lr_decay <= 1:
            raise ConfigError(f"{where}lr_decay: must be in (0, 1], got {self.lr_decay}")


@dataclass(frozen=True)
class SamplingSection:
    """Who trains each round (docs/scale.md). clients_per_round: an int is a count, a float in
    (0, 1] a share of expected_clients, None every client; with fedbuff, how many clients train at
    the same time. availability: a CSV trace client_id,first_round,last_round (commlab.fl.sampling)."""
    clients_per_round: int | float | None = None
    availability: str | None = None

    def check(self, where: str) -> None:
        if isinstance(self.clients_per_round, float) and not 0 < self.clients_per_round <= 1:
            raise ConfigError(f"{where}clients_per_round: a fraction must be in (0, 1], got {self.clients_per_round}")
        existing(where, "availability", self.availability)


@dataclass(frozen=True)
class StopSection:
    """End the run before `rounds` once a round's test accuracy reaches `accuracy`, or once the
    summed round times (rounds.csv round_time_s) reach `round_time_budget_s`: time-to-accuracy
    benchmarks stop where their measure is decided. None: no such stop."""
    accuracy: float | None = None
    round_time_budget_s: float | None = None

    def check(self, where: str) -> None:
        if self.accuracy is not None and not 0 < self.accuracy <= 1:
            raise ConfigError(f"{where}accuracy: must be in (0, 1], got {self.accuracy}")
        if self.round_time_budget_s is not None:
            positive(where, round_time_budget_s=self.round_time_budget_s)

    def reason(self, accuracy: float, round_time_sum_s: float) -> str | None:
        """Why the run ends after a round with this accuracy and summed round time, or None."""
        if self.accuracy is not None and accuracy >= self.accuracy:
            return f"accuracy {accuracy:.4f} reached the target {self.accuracy:g}"
        if self.round_time_budget_s is not None and round_time_sum_s >= self.round_time_budget_s:
            return f"round times {round_time_sum_s:.1f} s reached the budget {self.round_time_budget_s:g} s"
        return None


@dataclass(frozen=True)
class FedBuffSection:
    """strategy fedbuff only (commlab.fl.strategy.FedBuff): updates per server step, and the
    staleness (server versions) beyond which an update is rejected."""
    buffer_size: int = 2
    max_staleness: int = 10

    def check(self, where: str) -> None:
        positive(where, buffer_size=self.buffer_size)
        if self.max_staleness < 0:
            raise ConfigError(f"{where}max_staleness: must be >= 0, got {self.max_staleness}")


@dataclass(frozen=True)
class ControllerConfig(DdsNodeConfig):
    checkpoint_dir: str
    rounds: int
    expected_clients: int
    partition: PartitionSection = PartitionSection()  # each client partitions its own data; the manifest records all
    codec: CodecSection = CodecSection()          # uplink: what clients encode their updates with
    downlink: CodecSection = CodecSection()       # the model broadcast: fp32 sends the whole model each round
    training: TrainingSection = TrainingSection()
    strategy: StrategySection = StrategySection()
    min_clients: int = 1
    # Both round limits count from the later of the round's start and the last chunk that arrived,
    # so an update still coming in over a slow link extends them (commlab.fl.collect).
    round_deadline_s: float = 120.0     # close the round with >= min_clients answers after this
    round_hard_limit_s: float = 600.0   # fail if min_clients have not answered by then
    lost_client_grace_s: float = 30.0   # fail once too few clients are alive to reach min_clients for this long
    match_timeout_s: float = 120.0      # barrier before the first round
    init_path: str | None = None        # checkpoint file or directory to resume from
    keep_checkpoints: int = 1
    eval_batch_size: int = 1000
    threads: int = 1                    # torch intra-op threads (cores are shared)
    memory_phases: bool = False         # exact memory figures per phase; costs time (output.memory_watch)
    train_step: str = DEFAULT_TRAIN_STEP  # recorded only: each client runs the step of its own config
    adaptive: AdaptiveSection | None = None  # per-client qsgd bits and uplink rates (docs/adaptive.md)
    sampling: SamplingSection = SamplingSection()  # clients per round, availability trace (docs/scale.md)
    fedbuff: FedBuffSection | None = None    # strategy fedbuff only; None: its defaults
    stop: StopSection = StopSection()         # end before `rounds` at a target accuracy or time budget
    # Client processes hosting the clients (logical clients, docs/scale.md); None: one each.
    procs: int | None = None
    batchnorm: str = "aggregate"  # BATCHNORM; every client of the run has the same
    bn_calibration_samples: int = 1000  # batchnorm "local": training samples the statistics are recomputed from
    privacy: PrivacySection | None = None  # client-level DP: the run is DP-FedAvg (docs/privacy.md)
    secagg: SecAggSection | None = None    # each round as SecAgg+: the controller sees only the sum (docs/privacy.md)

    def check(self, where: str) -> None:
        check_train_step(self.train_step, f"{where}train_step")
        check_batchnorm(where, self.batchnorm)
        positive(where, bn_calibration_samples=self.bn_calibration_samples)
        if self.procs is not None and not 1 <= self.procs <= self.expected_clients:
            raise ConfigError(f"{where}procs: must be in 1..expected_clients ({self.expected_clients}), got {self.procs}")
        if self.procs is not None and self.adaptive is not None:
            raise ConfigError(f"{where}procs: adaptive shapes each client's own link; not with logical clients")
        positive(where, rounds=self.rounds, expected_clients=self.expected_clients,
                  min_clients=self.min_clients, round_deadline_s=self.round_deadline_s,
                  lost_client_grace_s=self.lost_client_grace_s,
                  match_timeout_s=self.match_timeout_s, keep_checkpoints=self.keep_checkpoints,
                  eval_batch_size=self.eval_batch_size, threads=self.threads)
        if self.min_clients > self.expected_clients:
            raise ConfigError(f"{where}min_clients: {self.min_clients} > expected_clients {self.expected_clients}")
        if self.round_hard_limit_s < self.round_deadline_s:
            raise ConfigError(f"{where}round_hard_limit_s: must be >= round_deadline_s")
        existing(where, "init_path", self.init_path)
        if self.adaptive is not None and self.adaptive.sets_bits and not takes_bits(self.codec.name):
            raise ConfigError(f"{where}codec.name: adaptive bits need a qsgd codec (one that takes levels), got "
                              f"{self.codec.name!r} (fixed_bits null: only the rates, for any codec)")
        if self.fedbuff is not None and self.strategy.name != "fedbuff":
            raise ConfigError(f"{where}fedbuff: only for strategy fedbuff, not {self.strategy.name}")
        if self.privacy is not None and self.strategy.name != "fedavg":
            raise ConfigError(f"{where}privacy: DP-FedAvg replaces the strategy; needs strategy fedavg, "
                              f"not {self.strategy.name}")
        self._check_sampling(f"{where}sampling.")
        if self.privacy is not None:
            self.privacy.check_run(f"{where}privacy.", self.expected_clients, self.per_round())
        if self.secagg is not None:
            self.secagg.check_run(f"{where}secagg.", self.codec.name, self.per_round(), self.strategy.name,
                                  {"adaptive": self.adaptive is not None, "procs": self.procs is not None},
                                  self.privacy)

    def _check_sampling(self, where: str) -> None:
        """Sampling against the run's clients; the availability trace is read here, so a bad row
        stops the launcher and the node before anything starts."""
        k = self.per_round()
        if not 1 <= k <= self.expected_clients:
            raise ConfigError(f"{where}clients_per_round: must be in 1..{self.expected_clients}, got {k}")
        if self.min_clients > k:
            raise ConfigError(f"{where}clients_per_round: {k} is below min_clients {self.min_clients}")
        if k < self.expected_clients and len(";".join(self.client_ids()[-k:])) > MAX_TEXT:
            raise ConfigError(f"{where}clients_per_round: {k} names do not fit in one TrainCmd ({MAX_TEXT} characters)")
        if self.adaptive is not None and (k < self.expected_clients or self.strategy.name == "fedbuff"
                                          or self.sampling.availability is not None):
            raise ConfigError(f"{where}clients_per_round: adaptive allocates for every client each round; "
                              "not with sampling, availability or fedbuff")
        if self.strategy.name == "krum" and self.strategy.params()["keep"] > k:
            raise ConfigError(f"{where}clients_per_round: krum cannot keep {self.strategy.params()['keep']} of the "
                              f"{k} updates of a round")
        if self.strategy.name == "fedbuff" and self.strategy_params()["buffer_size"] > k:
            raise ConfigError(f"{where}clients_per_round: {k} clients training at once cannot fill fedbuff.buffer_size "
                              f"{self.strategy_params()['buffer_size']}")
        self.availability_trace()

    def per_round(self) -> int:
        """Clients sampled each round (fedbuff: training at the same time)."""
        return per_round_count(self.sampling.clients_per_round, self.expected_clients)

    def availability_trace(self) -> Availability | None:
        path = self.sampling.availability
        return None if path is None else load_availability(path, self.client_ids())

    def strategy_params(self) -> dict[str, Any]:
        """Keyword arguments of the strategy's class beyond FedAvg's (fedbuff's from its own section)."""
        if self.strategy.name == "fedbuff":
            return to_dict(self.fedbuff or FedBuffSection())
        if self.strategy.name == "fltrust":
            from commlab.fl.root_update import RootUpdate  # torch: here only, not in the launcher's imports
            s = self.strategy
            return {"reference": RootUpdate(self.model, self.dataset, samples=s.root_samples or 100,
                                            seeds=self.seeds.tree,
                                            momentum=0.9 if s.root_momentum is None else s.root_momentum,
                                            train_step=self.train_step, threads=self.threads,
                                            buffers=self.sends_buffers)}
        return self.strategy.params()

    @property
    def sends_buffers(self) -> bool:
        """Whether the model vector carries BatchNorm's running statistics (models.flatten_params)."""
        return self.batchnorm == "aggregate"

    def client_ids(self) -> list[str]:
        return [client_name(i) for i in range(self.expected_clients)]

    def node_names(self) -> list[str]:
        """The client processes the controller waits for and hears from."""
        return [node.name for node in fl_roster(self.expected_clients, self.procs)[1:]]

    @cached_property
    def _nodes(self) -> dict[str, str]:
        return {client_name(i): client_node(i, self.procs) for i in range(self.expected_clients)}

    def node_of(self, client: str) -> str | None:
        """The node that speaks for `client` (itself, or the process hosting it); None: no client of this run."""
        return self._nodes.get(client)


@dataclass(frozen=True)
class OptimizerSection:
    momentum: float = 0.9
    weight_decay: float = 0.0

    def check(self, where: str) -> None:
        if not 0 <= self.momentum < 1:
            raise ConfigError(f"{where}momentum: must be in [0, 1), got {self.momentum}")


@dataclass(frozen=True)
class AttackSection:
    """TEST ONLY (benchmarks/bench_robust.py): the client forges its update under its valid
    identity. sign_flip sends -scale * delta instead of delta."""
    kind: str
    scale: float = 1.0

    def check(self, where: str) -> None:
        if self.kind != "sign_flip":
            raise ConfigError(f"{where}kind: unknown attack {self.kind!r} (known: sign_flip)")
        positive(where, scale=self.scale)

    def apply(self, delta: Any) -> Any:
        return delta * -self.scale  # a Python float keeps a float32 array float32


@dataclass(frozen=True)
class ClientConfig(DdsNodeConfig):
    client_id: int
    num_clients: int
    partition: PartitionSection = PartitionSection()
    optimizer: OptimizerSection = OptimizerSection()
    idle_timeout_s: float = 300.0   # exit with an error after this long without a command
    # Exit with one line once the controller is gone this long (lease expired; not restarted, not
    # back); at once when it said it was closing. Covers a restarted controller's start under load.
    controller_return_s: float = 180.0
    threads: int = 1
    memory_phases: bool = False     # exact memory figures per phase; costs time (output.memory_watch)
    train_step: str = DEFAULT_TRAIN_STEP  # "module:function" or "file.py:function": the loss of one batch
    attack: AttackSection | None = None   # test only: forge this client's updates
    speed_factor: float = 1.0       # compute heterogeneity: local training stretched to 1/speed_factor of its time
    # Logical clients (docs/scale.md): this process is host `client_id` of `procs` and trains
    # clients client_id, client_id + procs, ... one after another; None: it is client `client_id`.
    procs: int | None = None
    batchnorm: str = "aggregate"  # BATCHNORM: as the controller's
    warm_codec: CodecSection | None = None  # run once at start (the launcher: the run's); TrainCmd names the codec

    def check(self, where: str) -> None:
        check_train_step(self.train_step, f"{where}train_step")
        check_batchnorm(where, self.batchnorm)
        positive(where, num_clients=self.num_clients, idle_timeout_s=self.idle_timeout_s, threads=self.threads,
                 controller_return_s=self.controller_return_s)
        if not 0 < self.speed_factor <= 1:
            raise ConfigError(f"{where}speed_factor: must be in (0, 1], got {self.speed_factor}")
        if not 0 <= self.client_id < self.num_clients:
            raise ConfigError(f"{where}client_id: must be in 0..{self.num_clients - 1}, got {self.client_id}")
        if self.procs is not None and not 1 <= self.procs <= self.num_clients:
            raise ConfigError(f"{where}procs: must be in 1..num_clients ({self.num_clients}), got {self.procs}")
        if self.procs is not None and self.client_id >= self.procs:
            raise ConfigError(f"{where}client_id: a host index must be below procs ({self.procs}), got {self.client_id}")

    @property
    def sends_buffers(self) -> bool:
        return self.batchnorm == "aggregate"

    @property
    def name(self) -> str:
        """This process's node name."""
        return client_name(self.client_id) if self.procs is None else client_host_name(self.client_id)

    def hosted(self) -> list[int]:
        """The clients this process trains."""
        return [self.client_id] if self.procs is None else hosted_clients(self.client_id, self.num_clients, self.procs)


def load_controller_config(path: str | Path) -> ControllerConfig:
    return load_config(ControllerConfig, path)


def load_client_config(path: str | Path) -> ClientConfig:
    return load_config(ClientConfig, path)
