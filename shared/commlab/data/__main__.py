"""Print a partition's label histogram: python -m commlab.data --dataset mnist --clients 4 --scheme dirichlet --alpha 0.5 --seed 1"""
from __future__ import annotations

import argparse
import sys

from . import DatasetError, format_histogram, label_histogram, partition
from .dataset import classes_of, dataset_spec, load_raw
from .partition import SCHEMES, scheme_params


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m commlab.data", description=__doc__)
    ap.add_argument("--dataset", default="mnist", help="a dataset name (docs/workloads.md), text:<path> or "
                    "synthetic:<name>")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--scheme", default="iid", choices=SCHEMES)
    ap.add_argument("--alpha", type=float, default=0.5, help="dirichlet concentration")
    ap.add_argument("--labels-per-client", type=int, default=2, help="shards, label_quantity: labels each client holds")
    ap.add_argument("--exponent", type=float, default=1.0, help="quantity: client shares follow k^-exponent")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    params = scheme_params(args.scheme, alpha=args.alpha, labels_per_client=args.labels_per_client,
                           exponent=args.exponent)
    try:
        raw = load_raw(args.dataset)  # labels only: no need to normalise the images
        parts = partition(raw.train_y, args.clients, args.scheme, args.seed, groups=raw.train_groups, **params)
    except (DatasetError, ValueError) as e:
        print(f"python -m commlab.data: {e}", file=sys.stderr)
        return 2
    print(f"{args.dataset} train, {args.clients} clients, scheme={args.scheme} {params} seed={args.seed}")
    if raw.train_y.ndim == 1:
        print(format_histogram(label_histogram(raw.train_y, parts, classes_of(dataset_spec(args.dataset), raw))))
    else:  # a language model's targets: no classes to count
        print("\n".join(f"client {i}: {len(p)} sequences" for i, p in enumerate(parts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
