"""FL controller node: `python nodes/controller.py CONFIG.json` (see docs/fl.md)."""
from commlab.dds import DdsError
from commlab.fl.collect import RoundFailed
from commlab.fl.controller_node import run_controller
from commlab.fl.entry import main
from commlab.runs.process_exit import exit_now

if __name__ == "__main__":
    exit_now(main("controller", run_controller, expected=(DdsError, RoundFailed)))
