"""Federated learning over DDS: config, FedAvg strategy, update collection, checkpoints, controller, client, launcher."""
