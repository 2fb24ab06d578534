"""The `secagg` section of controller.conf.json: every synchronous FedAvg round runs as SecAgg+
(commlab.fl.secagg_round, docs/privacy.md). The controller learns the sum of the round's clipped,
quantized updates and nothing else about any one of them."""
from __future__ import annotations

from dataclasses import dataclass

from commlab.config.schema import ConfigError, positive
from commlab.privacy.config import PrivacySection
from commlab.privacy.field import FieldQuantizer, field_steps
from commlab.privacy.secagg import SecAggParams


@dataclass(frozen=True)
class SecAggSection:
    threshold: int | None = None    # shares that recover a secret; None: a majority of the neighbours
    neighbours: int | None = None   # per client (even); None: every other client of the round
    clip: float = 1.0               # L2 bound of a client's update; it sets the grid's range (privacy.update_grid)
    record_levels: bool = False     # each party saves its own view (a client its levels, the controller the sum)

    def check(self, where: str) -> None:
        positive(where, clip=self.clip)
        if self.neighbours is not None and self.neighbours < 2:
            raise ConfigError(f"{where}neighbours: must be >= 2, got {self.neighbours}")
        if self.threshold is not None and self.threshold < 1:
            raise ConfigError(f"{where}threshold: must be >= 1, got {self.threshold}")

    def for_round(self, clients: int) -> tuple[int, int]:
        """(neighbours, threshold) of a round of `clients` clients."""
        neighbours = min(self.neighbours or clients - 1, clients - 1)
        return neighbours, min(self.threshold or neighbours // 2 + 1, neighbours)

    def check_run(self, where: str, codec: str, per_round: int, strategy: str, others: dict[str, bool],
                  privacy: PrivacySection | None = None) -> None:
        """Against the run: a codec on the field grid, FedAvg, a round whose parameters hold, and
        DP the clients can add (distributed noise). `others`: the run's features that secure
        aggregation cannot serve, by config key."""
        try:
            steps = field_steps(codec)
        except ValueError as e:
            raise ConfigError(f"{where[:-len('secagg.')]}codec.name: {e}") from None
        if strategy != "fedavg":
            raise ConfigError(f"{where[:-1]}: needs strategy fedavg (the controller sees only the sum; "
                              f"{strategy} needs each update or an asynchronous buffer)")
        for key, used in others.items():
            if used:
                raise ConfigError(f"{where[:-1]}: not with {key} ({SECAGG_EXCLUDES[key]})")
        if per_round < 2:
            raise ConfigError(f"{where[:-1]}: needs at least 2 clients per round, got {per_round}")
        if self.neighbours is not None and self.neighbours > per_round - 1:
            raise ConfigError(f"{where}neighbours: {self.neighbours} is more than the other {per_round - 1} "
                              "clients of a round")
        noise = 0.0 if privacy is None else privacy.noise_multiplier
        if privacy is not None:
            self._check_privacy(where[:-len("secagg.")] + "privacy.", privacy)
        neighbours, threshold = self.for_round(per_round)
        try:
            quantizer = FieldQuantizer(self.clip, steps, per_round, noise * steps / 2)
            SecAggParams(tuple(f"c{i:09d}" for i in range(per_round)), neighbours, threshold, 0, quantizer, 1)
        except ValueError as e:
            raise ConfigError(f"{where[:-1]}: {e}") from None

    def _check_privacy(self, where: str, privacy: PrivacySection) -> None:
        """The clients clip to secagg.clip and draw the noise themselves: one clip, fixed, no seed."""
        if privacy.clip_norm != self.clip:
            raise ConfigError(f"{where}clip_norm: {privacy.clip_norm} differs from secagg.clip {self.clip}; under "
                              "secure aggregation the clients clip to one bound, the grid's")
        if privacy.adaptive_clipping:
            raise ConfigError(f"{where}adaptive_clipping: not with secagg (the clipped count would need its own "
                              "secure sum and noise)")
        if privacy.noise_seed is not None:
            raise ConfigError(f"{where}noise_seed: not with secagg (each client draws its noise from its own "
                              "operating system; a seed the controller knows would let it remove the noise)")


SECAGG_EXCLUDES = {
    "adaptive": "per-client bits would put the clients on different grids",
    "procs": "a host of many clients would hold the secrets of all of them; one process per client",
}
