"""One TensorBoard event file of scalars, written with the tensorboard package's own writer and
protocol buffers. Each scalar is what torch's SummaryWriter.add_scalar(new_style=True,
double_precision=True) writes (a float64 tensor under the `scalars` plugin); torch itself is not
imported, so a launcher following its run's CSVs stays a light process beside the nodes."""
from __future__ import annotations

import time
from pathlib import Path

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.summary.writer.event_file_writer import EventFileWriter

SCALARS = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))


class ScalarEvents:
    def __init__(self, log_dir: Path, max_queue: int = 1000, flush_secs: float = 30):
        self._file = EventFileWriter(str(log_dir), max_queue, flush_secs)

    def add_summary(self, summary: Summary, step: int | None = None) -> None:
        event = Event(summary=summary, wall_time=time.time())
        if step is not None:
            event.step = int(step)
        self._file.add_event(event)

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        tensor = TensorProto(double_val=[float(value)], dtype="DT_DOUBLE")
        self.add_summary(Summary(value=[Summary.Value(tag=tag, tensor=tensor, metadata=SCALARS)]), step)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()
