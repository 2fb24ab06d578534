"""FL controller node: `python nodes/controller.py CONFIG.json` (see docs/fl.md)."""
import sys

from commlab.dds import DdsError
from commlab.fl.collect import RoundFailed
from commlab.fl.controller_node import run_controller
from commlab.fl.entry import main

if __name__ == "__main__":
    sys.exit(main("controller", run_controller, expected=(DdsError, RoundFailed)))
