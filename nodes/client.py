"""FL client node: `python nodes/client.py CONFIG.json` (see docs/fl.md)."""
import sys

from commlab.dds import DdsError
from commlab.fl.client import ClientIdle
from commlab.fl.client_node import run_client
from commlab.fl.entry import main

if __name__ == "__main__":
    sys.exit(main("client", run_client, expected=(DdsError, ClientIdle)))
