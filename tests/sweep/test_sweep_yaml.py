"""YAML sweep files: the same sweep as its JSON twin (same cells, same run ids), and a bad key in
either is refused in one line naming the key and the file."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from commlab.sweep.spec import SweepError, load

pytest.importorskip("yaml")

SMOKE = Path(__file__).resolve().parents[2] / "experiments" / "sweeps" / "smoke.json"
# experiments/sweeps/smoke.json written as YAML, keys in another order, a flag with underscores (the
# grid's axes in the same order: it orders the cells).
SMOKE_YAML = """\
name: smoke
launcher: fl
grid:
  codec: [fp32, int8]
  profile: [lan, 10mbit]
fixed:
  clients: 2
  samples_per_round: 256
  batch-size: 32
  train-subset: 2000
  test-subset: 500
seeds: [0, 1]
stop:
  rounds: 3
target_accuracy: 0.4
cell_timeout_s: 600
"""


def test_a_yaml_sweep_is_the_same_sweep_as_its_json_twin(tmp_path):
    path = tmp_path / "smoke.yaml"
    path.write_text(SMOKE_YAML)
    from_yaml, from_json = load(path), load(SMOKE)
    assert [c.run_id for c in from_yaml.cells] == [c.run_id for c in from_json.cells]
    assert from_yaml.cells == from_json.cells and len(from_yaml.cells) == 8
    assert (from_yaml.name, from_yaml.target_accuracy, from_yaml.cell_timeout_s) == \
        (from_json.name, from_json.target_accuracy, from_json.cell_timeout_s)


@pytest.mark.parametrize("suffix", [".json", ".yaml", ".yml"])
def test_a_bad_key_is_named_with_the_file_in_one_line(tmp_path, suffix):
    data = {**json.loads(SMOKE.read_text()), "seedz": [0]}
    path = tmp_path / f"bad{suffix}"
    path.write_text(json.dumps(data))  # JSON is YAML too
    with pytest.raises(SweepError) as e:
        load(path)
    message = str(e.value)
    assert "unknown keys ['seedz']" in message and str(path) in message and "\n" not in message


def test_a_bad_stop_key_and_broken_yaml_are_named_with_the_file(tmp_path):
    path = tmp_path / "stop.yaml"
    path.write_text(SMOKE_YAML.replace("  rounds: 3", "  roundz: 3"))
    with pytest.raises(SweepError, match=r"stop\.yaml: unknown stop metric \['roundz'\]"):
        load(path)
    path.write_text("grid: [unclosed\n")
    with pytest.raises(SweepError) as e:
        load(path)
    assert "not valid YAML" in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)
