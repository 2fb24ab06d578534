"""The CSV tables of a run folder (docs/architecture.md, "Results layout"): every table's columns,
declared once for the nodes that write them (through run_folder.CsvTable) and the report that reads them.

    rounds.csv            FL controller, a row a round
    clients-<i>.csv       FL client i, a row a round
    steps-rank<r>.csv     DDP rank r, a row a step
    epochs-rank<r>.csv    DDP rank r, a row an epoch
"""
from __future__ import annotations

COLUMNS: dict[str, list[str]] = {
    "rounds": ["round", "round_time_s", "participants", "n_participants", "bytes_up", "bytes_down",
               "aggregate_time_s", "decode_time_s", "test_accuracy", "test_loss", "rejected_updates",
               "broadcast_time_s", "downlink_encode_time_s", "bytes_down_multicast", "iface_bytes_up",
               "iface_bytes_down", "resyncs", "wall_time_s",
               # privacy spent by the rounds so far (docs/privacy.md); empty: the run promises none
               "epsilon",
               # shaped runs: each participant's link rate (bit/s) when the round's updates were in,
               # from the run's link-rates.csv (commlab.links.trace), "client-0=10000000;..."
               "client_rates_bps"],
    "clients": ["round", "client_id", "num_samples", "bytes_up", "bytes_down", "comm_time_s",
                "train_time_s", "encode_time_s", "decode_time_s",
                # adaptive (docs/adaptive.md): qsgd bits, uplink rate applied (bit/s, empty: not
                # shaped by the client), upload time and payload goodput, emulated compute slowdown
                "bits", "rate_bps", "upload_s", "goodput_Bps", "stretch_s"],
    "steps": ["step", "epoch", "rank", "bytes_sent", "bytes_received", "comm_time_s", "compute_time_s",
              "compress_time_s", "decompress_time_s", "step_time_s", "density", "train_loss",
              # CPU seconds of the whole process (every thread: training, transport, collective)
              # during the step: steadier under a shared machine's load than the step's wall time
              "cpu_time_s"],
    "epochs": ["epoch", "rank", "step", "test_accuracy", "test_loss", "epoch_time_s"],
}
# Text columns; every other column is a number. Numeric columns that may be empty (a round or
# epoch without evaluation; interface counters of a node on loopback, which it shares; the upload
# time and goodput of a client row whose update was not sent, as FedBuff's clients write), and
# columns added after a table's first version, which older runs lack (read as empty).
TEXT = {"participants", "client_id", "client_rates_bps"}
OPTIONAL = {"test_accuracy", "test_loss", "iface_bytes_up", "iface_bytes_down", "bits", "rate_bps", "upload_s",
            "goodput_Bps", "epsilon"}
ADDED = {"broadcast_time_s", "downlink_encode_time_s", "bytes_down_multicast", "iface_bytes_up",
         "iface_bytes_down", "resyncs", "wall_time_s", "bits", "rate_bps", "upload_s", "goodput_Bps", "stretch_s",
         "epsilon", "client_rates_bps", "cpu_time_s"}
