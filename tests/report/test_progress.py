"""commlab.output.progress: plain lines off a terminal, a bar redrawn in place on one, ETA arithmetic, and
following a CSV file that another process appends to. No real time: the clock is injected."""
from __future__ import annotations

import io

import pytest

from commlab.output import progress as progress_module
from commlab.output.progress import CsvProgress, Progress, echo, format_duration


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (45, "45s"), (59.6, "1m00s"), (125, "2m05s"),
                                           (3780, "1h03m"), (-3, "0s")])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_plain_lines_without_a_terminal(clock):
    out = io.StringIO()
    with Progress(10, "round", out, clock=clock) as p:
        clock.now += 62
        p.update(3, "acc 0.9712")
        clock.now += 10
        p.update(4)
    lines = out.getvalue().splitlines()
    assert lines == ["[progress] round 3/10 (30%), elapsed 1m02s, ETA 2m25s, acc 0.9712",
                     "[progress] round 4/10 (40%), elapsed 1m12s, ETA 1m48s"]
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()


def test_plain_lines_are_thinned_but_the_last_state_is_printed(clock):
    out = io.StringIO()
    p = Progress(100, "step", out, clock=clock, min_line_interval_s=5)
    for step in range(1, 21):
        clock.now += 1
        p.update(step)
    p.close()
    counts = [line.split()[2] for line in out.getvalue().splitlines()]
    assert counts == ["1/100", "6/100", "11/100", "16/100", "20/100"]


def test_terminal_bar_is_redrawn_in_place(clock, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    tty = FakeTty()
    p = Progress(10, "round", tty, clock=clock)
    clock.now += 62
    p.update(3, "acc 0.9712")
    assert tty.getvalue().startswith("\r\x1b[K[######..............] 3/10 rounds  30%  elapsed 1m02s  ETA 2m25s  "
                                      "acc 0.9712")
    p.log("[controller] round 4 started")
    assert capsys.readouterr().out == "[controller] round 4 started\n"
    p.refresh()  # same text as on screen: not written again
    p.close()
    written = tty.getvalue()
    assert written.count("\r\x1b[K") == 3  # draw, clear before the log line, redraw
    assert written.endswith("\n") and "\n" not in written[:-1]


def test_terminal_bar_is_cut_to_the_terminal_width(clock, monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")  # a wrapped line could not be redrawn by `\r`
    tty = FakeTty()
    with Progress(10, "round", tty, clock=clock) as p:
        p.update(3, "acc 0.9712")
    assert all(len(line) <= 39 for line in tty.getvalue().replace("\x1b[K", "").replace("\n", "").split("\r"))


def test_echo_goes_around_the_live_bar_only_while_it_is_drawn(clock, capsys):
    tty = FakeTty()
    with Progress(2, "run", tty, clock=clock):
        echo("node line\n")
        assert tty.getvalue().count("\r\x1b[K") == 2  # clear, redraw (nothing was on screen before)
    echo("after")
    assert capsys.readouterr().out == "node line\nafter\n"
    assert progress_module._live is None


def test_plain_progress_is_never_the_live_bar(clock):
    with Progress(2, "run", FakeTty(), in_place=False, clock=clock):
        assert progress_module._live is None


def test_eta_is_elapsed_per_unit_times_units_left(clock):
    p = Progress(10, "round", io.StringIO(), clock=clock)
    assert p.eta_s() is None  # nothing done yet
    clock.now += 30
    p.update(3)
    assert p.eta_s() == pytest.approx(70.0)
    # A resumed run: 5 units were done before, 2 here in 30 s -> 15 s per unit, 3 left.
    p.start = 5
    p.update(7)
    assert p.eta_s() == pytest.approx(45.0)
    p.update(10)
    assert p.eta_s() == 0
    p.close()


def test_csv_watcher_picks_up_appended_rows(tmp_path, clock):
    path = tmp_path / "rounds.csv"
    out = io.StringIO()
    watcher = CsvProgress(path, Progress(3, "round", out, clock=clock), "round", note_column="test_accuracy",
                          note_label="acc")
    watcher.poll_once()  # no file yet
    assert out.getvalue() == ""
    path.write_text("round,round_time_s,test_accuracy\n")
    watcher.poll_once()
    assert out.getvalue() == ""
    with path.open("a") as f:
        f.write("1,30.0,0.91\n2,30.")  # the second row is still being written
    clock.now += 60
    watcher.poll_once()
    assert out.getvalue().splitlines() == ["[progress] round 1/3 (33%), elapsed 1m00s, ETA 2m00s, acc 0.9100"]
    with path.open("a") as f:
        f.write("0,0.95\n")
    watcher.poll_once()
    assert out.getvalue().splitlines()[-1] == "[progress] round 2/3 (66%), elapsed 1m00s, ETA 30s, acc 0.9500"
    watcher.stop()  # never started: takes in the last rows and closes the Progress
    assert watcher.progress.closed


def test_csv_watcher_counts_steps_from_zero_and_a_resumed_run_from_its_position(tmp_path, clock):
    path = tmp_path / "steps-rank0.csv"
    path.write_text("step,train_loss\n100,0.5\n101,0.4\n")
    out = io.StringIO()
    watcher = CsvProgress(path, Progress(200, "step", out, clock=clock), "step", numbered_from=0)
    clock.now += 20
    watcher.poll_once()
    assert watcher.progress.done == 102 and watcher.rows == 2
    assert watcher.progress.eta_s() == pytest.approx(10 * 98)  # 2 steps in 20 s here, 98 left
    watcher.stop()


def test_detail_lines_follow_the_plain_line_each_marked_and_indented(clock):
    out = io.StringIO()
    with Progress(8, "cell", out, clock=clock) as p:
        clock.now += 60
        p.update(2, "ok 2, running 2, failed 0", ["fl-a codec=int8, seed 0: round 1/3", "fl-b codec=fp32, seed 1: round 0/3"])
        p.update(2, "ok 2, running 1, failed 0", [])
    assert out.getvalue().splitlines() == [
        "[progress] cell 2/8 (25%), elapsed 1m00s, ETA 3m00s, ok 2, running 2, failed 0",
        "[progress]   fl-a codec=int8, seed 0: round 1/3",
        "[progress]   fl-b codec=fp32, seed 1: round 0/3",
        "[progress] cell 2/8 (25%), elapsed 1m00s, ETA 3m00s, ok 2, running 1, failed 0"]


def test_terminal_detail_lines_sit_under_the_bar_and_are_erased_with_it(clock, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    tty = FakeTty()
    p = Progress(8, "cell", tty, clock=clock)
    p.update(1, "ok 1", ["fl-a: round 1/3", "fl-b: round 2/3"])
    first = tty.getvalue()
    assert first == "\r\x1b[K[##..................] 1/8 cells  12%  elapsed 0s  ETA 0s  ok 1\n  fl-a: round 1/3\n  fl-b: round 2/3"
    p.update(1, "ok 1", ["fl-b: round 3/3"])
    redraw = tty.getvalue()[len(first):]
    assert redraw.startswith("\x1b[2A\r\x1b[J[##")  # up over the two detail lines, erase to the end
    assert redraw.endswith("ok 1\n  fl-b: round 3/3")
    p.log("[sweep] ok fl-a")
    assert tty.getvalue()[len(first) + len(redraw):].startswith("\x1b[1A\r\x1b[J")
    assert capsys.readouterr().out == "[sweep] ok fl-a\n"
    p.close()
