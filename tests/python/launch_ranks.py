#!/usr/bin/env python3
"""Runs N ranks of a test script as torchrun would start them (MASTER_ADDR, MASTER_PORT, RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), with the build tree's package importable, and fails
unless every rank exits as expected (0, or what --expect says) within the limit.

usage: launch_ranks.py [-n N] [--limit S] [--expect RANK=CODE ...] SCRIPT [ARGS...]
"""
import argparse
import os
import socket
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))


def free_port():
    # torch's store binds it at once in rank 0; the window between is the usual launcher's.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-n", type=int, default=2)
    p.add_argument("--limit", type=float, default=120.0, help="seconds for the whole run")
    p.add_argument("--expect", action="append", default=[], help="RANK=CODE: that rank's exit status "
                   "(negative: killed by that signal)")
    p.add_argument("--pythonpath", default=os.environ.get("CHORUS_PYTHONPATH", ""))
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args()
    expect = {r: 0 for r in range(a.n)}
    for e in a.expect:
        r, c = e.split("=")
        expect[int(r)] = int(c)
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(a.n),
               LOCAL_WORLD_SIZE=str(a.n), PYTHONUNBUFFERED="1")
    if a.pythonpath:
        env["PYTHONPATH"] = a.pythonpath + os.pathsep + here + (os.pathsep + env["PYTHONPATH"] if "PYTHONPATH" in env else "")
    procs = []
    for r in range(a.n):
        procs.append(subprocess.Popen([sys.executable, a.script] + a.args,
                                      env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    deadline = time.monotonic() + a.limit
    codes = {}
    outs = {}
    for r, pr in enumerate(procs):
        try:
            outs[r], _ = pr.communicate(timeout=max(0.1, deadline - time.monotonic()))
            codes[r] = pr.returncode
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            outs[r], _ = pr.communicate()
            codes[r] = "hung"
    ok = True
    for r in range(a.n):
        if r not in codes:
            outs[r], _ = procs[r].communicate()
            codes[r] = procs[r].returncode
        if codes[r] != expect[r]:
            ok = False
    for r in range(a.n):
        status = "ok" if codes[r] == expect[r] else f"FAILED (expected {expect[r]})"
        print(f"--- rank {r}: exit {codes[r]} {status}")
        sys.stdout.write(outs[r] or "")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
