"""FL client node: `python nodes/client.py CONFIG.json` (see docs/fl.md)."""
from commlab.dds import DdsError
from commlab.fl.client import ClientIdle
from commlab.fl.client_node import run_client
from commlab.fl.entry import main
from commlab.runs.process_exit import exit_now

if __name__ == "__main__":
    exit_now(main("client", run_client, expected=(DdsError, ClientIdle)))
