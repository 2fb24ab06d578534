"""Print a partition's label histogram: python -m commlab.data --dataset mnist --clients 4 --scheme dirichlet --alpha 0.5 --seed 1"""
from __future__ import annotations

import argparse

from . import dataset_names, format_histogram, label_histogram, partition
from .dataset import dataset_spec, load_raw


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m commlab.data", description=__doc__)
    ap.add_argument("--dataset", default="mnist", choices=dataset_names())
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--scheme", default="iid", choices=["iid", "dirichlet", "shards"])
    ap.add_argument("--alpha", type=float, default=0.5, help="dirichlet concentration")
    ap.add_argument("--labels-per-client", type=int, default=2, help="shards: labels each client holds")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    params = {"dirichlet": {"alpha": args.alpha}, "shards": {"labels_per_client": args.labels_per_client}}
    labels = load_raw(args.dataset)[1]  # labels only: no need to normalise the images
    parts = partition(labels, args.clients, args.scheme, args.seed, **params.get(args.scheme, {}))
    print(f"{args.dataset} train, {args.clients} clients, scheme={args.scheme} "
          f"{params.get(args.scheme, {})} seed={args.seed}")
    print(format_histogram(label_histogram(labels, parts, dataset_spec(args.dataset).num_classes)))


if __name__ == "__main__":
    main()
