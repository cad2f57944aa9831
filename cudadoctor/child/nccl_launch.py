"""Start every rank of a collective on this machine, and end them all together.

Run as `python -m cudadoctor.child.nccl_launch` by cudadoctor's own interpreter, with a JSON plan on stdin:

    {"python": "/venv/bin/python", "script": ".../nccl_rank.py", "world": 2, "args": ["--mode", "check"],
     "env": {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": null}, "deadline_s": 60, "grace_s": 3}

One process per rank, in this launcher's process group (the parent started the launcher as a group
leader with a timeout, so killing that group kills every rank even if the launcher itself hangs).
Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT on top of
the environment the launcher inherited (the user's); `env` changes only what NCCL logs and where
(None removes a variable).

The launcher stops every rank when the deadline passes (a hang), or `grace_s` after the first rank
exits with an error (the others would wait for it forever). It relays, each as one marked line:
every record a rank prints (with "rank" added), the NCCL_DEBUG lines that matter (transports,
versions, variables NCCL read, warnings), then per rank how it ended and the last lines it printed
that were neither (tracebacks), then "end".
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

MARK = "@@CUDADOCTOR-NCCL@@"
KEEP_INFO = ("NCCL version", "set by environment to", "Using network", "No device found", "NET/Socket : Using",
             "NET/IB : Using", "Bootstrap : Using", "nvls channels", "Init COMPLETE", "Connected all rings")
MAX_NCCL_LINES = 200  # per rank
TAIL = 30  # other lines kept per rank


def emit(rec):
    sys.stdout.write(MARK + " " + json.dumps(rec, default=str) + "\n")
    sys.stdout.flush()


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


class Reader(object):
    """Reads one rank's merged stdout/stderr: relays its records and chosen NCCL lines, keeps a tail."""

    def __init__(self, rank, stream, lock):
        self.rank, self.stream, self.lock = rank, stream, lock
        self.tail, self.nccl, self.seen_via = [], 0, set()
        self.thread = threading.Thread(target=self.run)
        self.thread.daemon = True

    def relay(self, rec):
        with self.lock:
            emit(rec)

    def nccl_line(self, line):
        if self.nccl >= MAX_NCCL_LINES:
            return
        keep = " NCCL WARN " in line or any(k in line for k in KEEP_INFO)
        if " via " in line:
            # "Channel 03/0 : 0[0] -> 1[1] via P2P/CUMEM": one line per (peers, transport), not per channel
            key = line.split(" : ", 1)[-1] if " : " in line else line
            keep = key not in self.seen_via
            self.seen_via.add(key)
        if keep:
            self.nccl += 1
            self.relay({"rank": self.rank, "stage": "nccl-log", "line": line[:600]})

    def feed(self, line):
        """One line of the rank's output: a record (relayed, with the rank), an NCCL line (relayed if it
        matters) or anything else (kept in the tail)."""
        i = line.find(MARK)
        if i >= 0:
            try:
                rec = json.loads(line[i + len(MARK):])
            except ValueError:
                return
            if isinstance(rec, dict):
                rec["rank"] = self.rank
                self.relay(rec)
        elif " NCCL " in line:
            self.nccl_line(line)
        elif line.strip():
            self.tail.append(line[:400])
            del self.tail[:-TAIL]

    def run(self):
        try:
            for raw in self.stream:
                self.feed(raw.decode("utf-8", "replace").rstrip("\r\n"))
        except (OSError, ValueError):
            pass


def rank_env(plan, rank, port):
    env = dict(os.environ)
    for k, v in (plan.get("env") or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(plan["world"]),
               LOCAL_WORLD_SIZE=str(plan["world"]), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return env


def stop(procs):
    for p in procs:
        if p.poll() is None:
            try:
                p.kill()
            except OSError:
                pass


def main():
    try:
        plan = json.loads(sys.stdin.read() or "{}")
        world = int(plan["world"])
        argv = [plan["python"], plan["script"]] + [str(a) for a in plan.get("args") or []]
    except (ValueError, KeyError, TypeError) as e:
        emit({"stage": "launcher", "event": "bad-plan", "error": str(e)})
        return 2
    deadline_s = float(plan.get("deadline_s", 60))
    grace_s = float(plan.get("grace_s", 3))
    port = free_port()
    t0 = time.monotonic()
    emit({"stage": "launcher", "event": "start", "world": world, "port": port, "argv": argv,
          "deadline_s": deadline_s})
    lock = threading.Lock()
    procs, readers = [], []
    for r in range(world):
        try:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 env=rank_env(plan, r, port))
        except OSError as e:
            with lock:
                emit({"stage": "launcher", "event": "not-started", "rank": r, "error": str(e)})
            stop(procs)
            return 0
        procs.append(p)
        rd = Reader(r, p.stdout, lock)
        rd.thread.start()
        readers.append(rd)
    first_fail = None
    how = "finished"
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            break
        now = time.monotonic()
        if first_fail is None and any(c not in (None, 0) for c in codes):
            first_fail = now
        if first_fail is not None and now - first_fail > grace_s:
            how = "stopped after a rank failed"
            break
        if now - t0 > deadline_s:
            how = "deadline"
            break
        time.sleep(0.05)
    alive = [r for r, p in enumerate(procs) if p.poll() is None]
    if alive:
        with lock:
            emit({"stage": "launcher", "event": how, "alive": alive, "seconds": round(time.monotonic() - t0, 3)})
    stop(procs)
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass  # stuck in the kernel (a hung driver): abandoned; the parent's group kill is the backstop
    for rd in readers:
        rd.thread.join(timeout=2)
    with lock:
        for r, (p, rd) in enumerate(zip(procs, readers)):
            emit({"stage": "launcher", "event": "exit", "rank": r, "rc": p.returncode, "killed": r in alive,
                  "tail": rd.tail})
        emit({"stage": "launcher", "event": "end", "how": how, "seconds": round(time.monotonic() - t0, 3)})
    if os.getpgrp() == os.getpid():  # anything a rank left behind in our group (never the caller's group)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            os.killpg(os.getpgrp(), signal.SIGTERM)
        except OSError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
