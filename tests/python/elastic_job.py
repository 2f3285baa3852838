"""Runs test_elastic.py as an elastic job: chorus-run -n 3 --elastic (rank 1 kills itself), then,
once the survivors say they shrank, a newcomer with chorus-run --join. Both chorus-runs must exit
0, the survivors and the newcomer must say they grew. usage: elastic_job.py --chorus-run PATH"""
import argparse
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument("--chorus-run", required=True)
ap.add_argument("--limit", type=float, default=120)
a = ap.parse_args()
here = os.path.dirname(os.path.abspath(__file__))
script = [sys.executable, os.path.join(here, "test_elastic.py")]
deadline = time.monotonic() + a.limit


def lines_of(proc, q, tag):
    for line in proc.stdout:
        q.put((tag, line.rstrip("\n")))
    q.put((tag, None))


def fail(why, seen):
    print("\n".join(f"[{t}] {l}" for t, l in seen), file=sys.stderr)
    sys.exit(f"elastic_job: {why}")


with tempfile.TemporaryDirectory(prefix="chorus-elastic-") as d:  # the join file's: this user's alone
    join = os.path.join(d, "job.join")
    q, seen, ended = queue.Queue(), [], set()
    job = subprocess.Popen([a.chorus_run, "-n", "3", "--elastic", "--join-file", join, "--tag-output"] + script +
                           ["member"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    threading.Thread(target=lines_of, args=(job, q, "job"), daemon=True).start()
    newcomer = None
    try:
        while len(ended) < (2 if newcomer else 1):
            try:
                tag, line = q.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                fail("no end within the limit", seen)
            if line is None:
                ended.add(tag)
                continue
            seen.append((tag, line))
            if newcomer is None and "rank 2: SHRUNK to 2" in line:
                newcomer = subprocess.Popen([a.chorus_run, "--join", join, "-n", "1", "--tag-output"] + script +
                                            ["newcomer"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                threading.Thread(target=lines_of, args=(newcomer, q, "newcomer"), daemon=True).start()
        codes = {"job": job.wait(timeout=30), "newcomer": newcomer.wait(timeout=30) if newcomer else None}
    finally:
        for p in (job, newcomer):
            if p and p.poll() is None:
                p.kill()
    text = "\n".join(l for _, l in seen)
    for want in ("rank 0: SHRUNK to 2", "rank 2: SHRUNK to 2", "rank 0: GROWN to 3, state ok",
                 "rank 1: GROWN to 3, state ok", "rank 2: GROWN to 3, state ok", "was killed by signal 9"):
        if want not in text:
            fail(f"no line saying '{want}'", seen)
    if codes != {"job": 0, "newcomer": 0}:
        fail(f"exit codes {codes}", seen)
    print(text)
    print("elastic_job: ok")
