"""The launchers stay light: python -m commlab.fl.run, ddp.run and peers.run start their nodes and
follow the run into TensorBoard (report.tracking, testbed.backend) without importing torch, pandas
or matplotlib, each seconds of CPU a run's nodes would otherwise wait for on a small machine. The
nodes import torch themselves; a config naming a train step of its own is loaded, and may."""
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
HEAVY = ("torch", "pandas", "matplotlib")
STEP_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "label_smoothing_step.py"
LAUNCHERS = ("commlab.fl.run", "commlab.ddp.run", "commlab.peers.run", "commlab.peers.flower_run",
             "commlab.testbed.backend", "commlab.report.tracking", "commlab.report.tb_events")


@pytest.mark.parametrize("module", LAUNCHERS)
def test_a_launcher_imports_no_training_or_report_library(module):
    check = f"import sys, {module}; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "", f"{module} imports {loaded.strip()}"


def test_the_default_train_step_is_checked_without_torch():
    """A config with the default step is checked without loading it; another step is loaded."""
    check = ("import sys; from commlab.config.train_step_spec import DEFAULT_TRAIN_STEP, check_train_step; "
             "check_train_step(DEFAULT_TRAIN_STEP); print('torch' in sys.modules, end=' '); "
             f"check_train_step('{STEP_FILE}:step'); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]
