"""Node processes forked from one that has already imported their libraries.

Every node is `python nodes/<role>.py CONFIG`, and every one of them imports torch, numpy, numba
and Cyclone DDS before it does anything: seconds of CPU each, paid again by every node of every run
on the same few cores. A launcher instead starts one zygote, a child process that imports them
once (PRELOAD) and then waits. For each node it asks the zygote to fork: the fork takes the node's
arguments, environment, working folder and output, and runs its program as `python` would, with
nothing left to import. The launcher gets a handle like subprocess.Popen's (pid, poll, wait,
returncode, signals); the node is the zygote's child, which reports each exit code.

    with Zygote() as zygote:
        proc = zygote.spawn([sys.executable, "nodes/client.py", "client-0.json"], env, stdout=log)
        proc.wait()

Requests and reports are JSON messages on a Unix seqpacket socket; output descriptors travel with
the request (SCM_RIGHTS). The zygote has one thread, so a fork copies no lock held by another. It ends when
its launcher closes the socket (the launcher ended), leaving any node still running as it is.
Programs that are not node programs (a Flower SuperLink), and nodes run through a prefix (`ip netns
exec`), are started by subprocess as before.
"""
from __future__ import annotations

import io
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Sequence

from .process_exit import exit_now

# What every node program imports; anything else a node imports it imports itself after the fork.
PRELOAD = ("torch", "numpy", "numba", "cyclonedds.domain", "cyclonedds.pub", "cyclonedds.sub",
           "commlab.fl.client_node", "commlab.fl.controller_node", "commlab.ddp.train", "commlab.peers.gloo")
MAX_MESSAGE = 1 << 20  # a request: argv, the environment and a folder


class ZygoteError(RuntimeError):
    """The zygote could not start a node or ended while nodes it forked were running (one line)."""


class ForkedProcess:
    """A node forked by the zygote, used as a subprocess.Popen is."""

    def __init__(self, zygote: Zygote, pid: int, args: Sequence[str]):
        self.zygote, self.pid, self.args = zygote, pid, list(args)
        self.stdout: IO[str] | None = None  # the output pipe's reading end (spawn_piped)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.zygote.wait_exit(self.pid, timeout, self.args)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The launcher's side: starts the zygote process, asks it for forks, hears their exits."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen([sys.executable, "-m", "commlab.runs.zygote", str(theirs.fileno())],
                                     pass_fds=(theirs.fileno(),))
        theirs.close()
        self.sock = ours
        self._exits: dict[int, int] = {}
        self._replies: list[dict] = []
        self._ended: str | None = None
        self._cond = threading.Condition()
        self._request = threading.Lock()  # one request and its reply at a time
        self._reader = threading.Thread(target=self._read, name="zygote reports", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while data := _recv(self.sock):
            msg = json.loads(data)
            with self._cond:
                if "exit" in msg:
                    self._exits[msg["exit"]] = msg["code"]
                else:
                    self._replies.append(msg)
                self._cond.notify_all()
        code = self.proc.wait()
        with self._cond:
            self._ended = f"the node zygote (pid {self.proc.pid}) ended with exit code {code}"
            self._cond.notify_all()

    def spawn(self, argv: Sequence[str], env: dict[str, str], stdout: int | IO, stderr: int | IO | None = None,
              cwd: str | None = None) -> ForkedProcess:
        """Fork a node running `argv` (forkable); `stdout`/`stderr` are descriptors or open files
        (stderr: stdout's when None)."""
        if not forkable(argv):
            raise ValueError(f"the zygote runs `python PROGRAM ARGS` or `python -c CODE ARGS`, not {list(argv)}")
        fds = [f if isinstance(f, int) else f.fileno() for f in (stdout, stderr if stderr is not None else stdout)]
        request = {"argv": list(argv), "env": env, "cwd": cwd or os.getcwd()}
        with self._request:
            try:
                socket.send_fds(self.sock, [json.dumps(request).encode()], fds)
            except OSError:  # the zygote is gone: the reader names how it ended
                self._reader.join(10)
            with self._cond:
                self._cond.wait_for(lambda: self._replies or self._ended)
                if not self._replies:
                    raise ZygoteError(f"{self._ended}; cannot start {argv[1] if len(argv) > 1 else argv}")
                reply = self._replies.pop(0)
        if "error" in reply:
            raise ZygoteError(reply["error"])
        return ForkedProcess(self, reply["pid"], argv)

    def spawn_piped(self, argv: Sequence[str], env: dict[str, str], cwd: str | None = None) -> ForkedProcess:
        """As spawn, with output (stdout and stderr) to a text pipe read from the handle's .stdout."""
        read, write = os.pipe()
        try:
            proc = self.spawn(argv, env, write, cwd=cwd)
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
        proc.stdout = open(read, encoding="utf-8", errors="replace")
        return proc

    def exit_code(self, pid: int) -> int | None:
        with self._cond:
            if pid not in self._exits and self._ended and not _alive(pid):
                raise ZygoteError(f"{self._ended}; node pid {pid} ended with an unknown exit code")
            return self._exits.pop(pid, None)  # the handle keeps it; the pid may be reused

    def wait_exit(self, pid: int, timeout: float | None, args: Sequence[str]) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            code = self.exit_code(pid)
            if code is not None:
                return code
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(list(args), timeout or 0.0)
            with self._cond:
                self._cond.wait(0.5 if left is None else min(left, 0.5))  # 0.5: to notice a vanished zygote

    def close(self) -> None:
        """End the zygote (nodes it forked keep running until their launcher ends them)."""
        self.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader; the zygote reads its end
        self.sock.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def forkable(argv: Sequence[str]) -> bool:
    """argv is this interpreter running a program file or `-c CODE` (no other option)."""
    return len(argv) >= 2 and argv[0] == sys.executable and (argv[1] == "-c" and len(argv) >= 3
                                                               or not argv[1].startswith("-"))


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(MAX_MESSAGE)
    except OSError:  # closed by close() while the reader waited
        return b""


def _alive(pid: int) -> bool:
    """Running or stopped: neither gone nor a zombie left for whoever adopts it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


_shared: Zygote | None = None
_shared_lock = threading.Lock()


def shared_zygote() -> Zygote:
    """This process's zygote, started on first use and kept until the process ends."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared._ended:
            _shared = Zygote()
        return _shared


class _Fork(Exception):
    """Raised in a fresh fork to leave the zygote's loop and run the node's program on top."""

    def __init__(self, request: dict):
        self.request = request


def _serve(sock: socket.socket) -> None:
    """The zygote's loop: fork a node per request, report each child's exit code."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the launcher and its nodes; EOF ends the zygote
    for name in PRELOAD:
        __import__(name)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj is wake_r:
                os.read(wake_r, 4096)
                continue
            data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 2)
            if not data:
                return  # the launcher ended
            try:
                pid = os.fork()
            except OSError as e:  # out of processes or memory: this node fails, the launcher says why
                pid = -1
                _report(sock, {"error": f"the node zygote could not fork {json.loads(data)['argv'][1]}: {e}"})
            if pid == 0:
                sel.close()
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.default_int_handler)
                for fd in (wake_r, wake_w):
                    os.close(fd)
                request = json.loads(data)
                request["fds"] = fds
                sock.close()
                raise _Fork(request)
            for fd in fds:
                os.close(fd)
            if pid > 0 and not _report(sock, {"pid": pid}):
                return
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if not _report(sock, {"exit": pid, "code": os.waitstatus_to_exitcode(status)}):
                return


def _report(sock: socket.socket, msg: dict) -> bool:
    """False when the launcher is gone."""
    try:
        sock.send(json.dumps(msg).encode())
        return True
    except OSError:
        return False


def _run_node(request: dict) -> None:
    """In the fork: become `python PROGRAM ARGS` with the request's environment, folder and output."""
    out, err = request["fds"]
    os.dup2(out, 1)
    os.dup2(err, 2)
    for fd in {out, err} - {1, 2}:
        os.close(fd)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True, line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True, line_buffering=True,
                                  errors="backslashreplace")
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    import numpy as np

    np.random.seed()  # the fork copied the zygote's global generator; Python's random reseeds itself
    program, *args = request["argv"][1:]
    if program == "-c":  # python -c CODE ARGS
        sys.argv, sys.path[0] = ["-c", *args[1:]], ""
        exec(compile(args[0], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        return
    sys.argv = [program, *args]
    sys.path[0] = str(Path(program).resolve().parent)
    import runpy

    runpy.run_path(program, run_name="__main__")


if __name__ == "__main__":
    try:
        _serve(socket.socket(fileno=int(sys.argv[1])))
    except _Fork as fork:
        _run_node(fork.request)  # node programs end the process themselves (exit_now)
        sys.exit(0)
    exit_now(0)  # the launcher ended: skip tearing down torch's modules
