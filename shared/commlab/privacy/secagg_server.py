"""The controller's side of a SecAgg+ round (commlab.privacy.secagg): relay keys and shares,
collect masked inputs, and from the survivors' shares take every mask off their sum."""
from __future__ import annotations

from collections.abc import Collection

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from commlab.privacy import shamir
from commlab.privacy.secagg import (PublicKeys, SecAggClient, SecAggParams, UnmaskReply, mask_sign, pair_seed,
                                    prg)


class SecAggServer:
    def __init__(self, params: SecAggParams):
        self.params = params
        self.keys: dict[str, PublicKeys] = {}
        self.sharers: set[str] = set()            # sent their shares (step 2)
        self.masked: dict[str, np.ndarray] = {}   # masked inputs (step 3)

    def broadcast_keys(self, keys: dict[str, PublicKeys]) -> dict[str, PublicKeys]:
        """The keys every client gets: those of this round's clients, each under its own name."""
        self.keys = {c: k for c, k in sorted(keys.items()) if c in self.params.clients and k.client == c}
        if len(self.keys) < self.params.threshold:
            raise ValueError(f"{len(self.keys)} clients advertised keys, the threshold is {self.params.threshold}")
        return dict(self.keys)

    def route_shares(self, sent: dict[str, dict[str, bytes]]) -> dict[str, dict[str, bytes]]:
        """Each sharer's ciphertexts by recipient (sender -> ciphertext), for sharers only: a client
        that sent no shares cannot have its masks removed, so nobody masks with it."""
        self.sharers = {c for c in sent if c in self.keys}
        routed: dict[str, dict[str, bytes]] = {c: {} for c in sorted(self.sharers)}
        for sender in sorted(self.sharers):
            for recipient, sealed in sent[sender].items():
                if recipient in self.sharers and recipient in self.params.neighbours(sender):
                    routed[recipient][sender] = sealed
        return routed

    def receive_masked(self, masked: dict[str, np.ndarray]) -> tuple[list[str], list[str]]:
        """Keep the sharers' masked inputs; (survivors, dropped) for the unmask request."""
        p = self.params
        for client, values in masked.items():
            if client not in self.sharers:
                raise ValueError(f"masked input from {client!r}, which shared no keys this round")
            if values.shape != (p.length,) or values.dtype != np.uint32 or int(values.max()) >= p.quantizer.modulus:
                raise ValueError(f"masked input from {client!r} is not {p.length} values below 2**{p.quantizer.bits}")
        self.masked = dict(masked)
        survivors = sorted(self.masked)
        if len(survivors) < p.threshold:
            raise ValueError(f"{len(survivors)} masked inputs, fewer than the threshold {p.threshold}")
        return survivors, sorted(self.sharers - set(survivors))

    def aggregate(self, replies: dict[str, UnmaskReply]) -> tuple[np.ndarray, int]:
        """The sum of the survivors' levels modulo the field, and how many they are."""
        p, q = self.params, self.params.quantizer
        survivors, dropped = sorted(self.masked), sorted(self.sharers - set(self.masked))
        total = np.zeros(p.length, np.uint64)
        for values in self.masked.values():
            total += values
        for client in survivors:
            seed = self._recover(client, {j: r.self_mask_shares for j, r in replies.items()})
            total += q.modulus - prg(seed, p.length, q.bits).astype(np.uint64)
        for gone in dropped:
            mask_sk = X25519PrivateKey.from_private_bytes(self._recover(gone, {j: r.key_shares for j, r in replies.items()}))
            if mask_sk.public_key().public_bytes_raw() != self.keys[gone].mask_key:
                raise ValueError(f"the shares of {gone!r}'s mask key rebuild another key")
            for client in (c for c in p.neighbours(gone) if c in self.masked):
                mask = prg(pair_seed(mask_sk, self.keys[client].mask_key), p.length, q.bits).astype(np.uint64)
                # `client` added mask_sign(client, gone) * mask; take it off.
                total += (q.modulus - mask) if mask_sign(client, gone) > 0 else mask
            total %= q.modulus
        return (total % q.modulus).astype(np.uint32), len(survivors)

    def _recover(self, owner: str, shares_by_holder: dict[str, dict[str, int]]) -> bytes:
        """`owner`'s secret from the shares its answering neighbours hold."""
        points = {self.params.index(holder) + 1: shares[owner] for holder, shares in shares_by_holder.items()
                  if owner in shares and holder in self.params.neighbours(owner)}
        if len(points) < self.params.threshold:
            raise ValueError(f"{len(points)} shares of {owner!r}'s secret arrived, {self.params.threshold} are needed")
        return shamir.combine(points, self.params.threshold)


def run_in_process(params: SecAggParams, clients: list[SecAggClient], levels: dict[str, np.ndarray],
                   gone_before_masked: Collection[str] = (), gone_before_unmask: Collection[str] = (),
                   ) -> tuple[tuple[np.ndarray, int], dict[str, np.ndarray]]:
    """One round with every party in this process (tests, benchmarks): clients in
    `gone_before_masked` drop after sharing keys, those in `gone_before_unmask` after their masked
    input. Returns aggregate()'s (sum, count) and the masked inputs the controller received."""
    server = SecAggServer(params)
    keys = server.broadcast_keys({c.name: c.advertise() for c in clients})
    routed = server.route_shares({c.name: c.share_keys(keys) for c in clients})
    masked = {c.name: c.masked_input(routed[c.name], levels[c.name]) for c in clients
              if c.name not in gone_before_masked}
    survivors, dropped = server.receive_masked(masked)
    replies = {c.name: c.unmask(survivors, dropped) for c in clients
               if c.name in survivors and c.name not in gone_before_unmask}
    return server.aggregate(replies), masked
