#!/usr/bin/python3
"""The elastic fault soak (docs/elastic.md): a job of chorus-elastic-example under
chorus-run --elastic loses a rank to SIGKILL, shrinks, trains on, takes in a newcomer started with
chorus-run --join, grows, and again, --kills times. The first process is never killed: its
resident memory is read after the first and the last cycle (it must stay flat: a retired epoch
lets its connections and rings go). At the end every process checks its weights
(the example's `weights ok`), and both chorus-runs must exit with 0.

  scripts/elastic_soak.py [--kills 100] [--procs 4] [--bin build/bin] [--join-host H]

With --join-host, the job is reached at 127.0.0.2 (--orchestrator-address) and every newcomer is
started on host H by chorus-run --join --hosts H, through a stand-in for ssh that runs the remote
command here (H an address of loopback, e.g. 127.0.0.3, so that the newcomer's node address is
one the members reach).
"""
import argparse, os, random, re, signal, subprocess, sys, tempfile, threading, time

class Lines:
    """A process's output lines, read by a thread, waited on with a deadline."""
    def __init__(self, proc):
        self.lines, self.cv = [], threading.Condition()
        threading.Thread(target=self._read, args=(proc.stdout,), daemon=True).start()
    def _read(self, f):
        for line in f:
            with self.cv:
                self.lines.append(line.rstrip("\n"))
                self.cv.notify_all()
        with self.cv:
            self.lines.append(None)
            self.cv.notify_all()
    def count(self, pattern):
        with self.cv:
            return sum(1 for l in self.lines if l is not None and re.search(pattern, l))
    def wait(self, pattern, n, limit=60):
        end = time.monotonic() + limit
        with self.cv:
            while sum(1 for l in self.lines if l is not None and re.search(pattern, l)) < n:
                if None in self.lines or not self.cv.wait(max(0, end - time.monotonic())):
                    if time.monotonic() >= end or None in self.lines:
                        raise SystemExit(f"waited for {n} x '{pattern}':\n" + "\n".join(l for l in self.lines if l))
    def pids(self):
        with self.cv:
            return [int(m.group(1)) for l in self.lines if l for m in [re.search(r"pid (\d+)$", l)] if m]

def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))

def main():
    a = argparse.ArgumentParser()
    a.add_argument("--kills", type=int, default=100)
    a.add_argument("--procs", type=int, default=4)
    a.add_argument("--bin", default="build/bin")
    a.add_argument("--join-host", default="")
    o = a.parse_args()
    d = tempfile.mkdtemp(prefix="chorus-soak-")  # mode 0700: the join file's directory
    join = os.path.join(d, "job.join")
    stop = os.path.join(d, "stop")
    example = [os.path.abspath(f"{o.bin}/chorus-elastic-example"), "--steps", "100000000", "--step-ms", "1", "--stop-file", stop]
    named, joining, env = [], [], dict(os.environ)
    if o.join_host:
        ssh = os.path.join(d, "fake-ssh")  # runs the remote command (its last argument) here, input and all
        with open(ssh, "w") as f:
            f.write('#!/bin/sh\nfor last; do :; done\nexec /bin/sh -c "$last"\n')
        os.chmod(ssh, 0o700)
        named, joining, env["CHORUS_RUN_SSH"] = ["--orchestrator-address", "127.0.0.2"], ["--hosts", o.join_host], ssh
    job = subprocess.Popen([f"{o.bin}/chorus-run", "-n", str(o.procs), "--elastic", "--join-file", join] + named + example,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = Lines(job)
    out.wait(r"elastic: rank \d+ of \d+, pid", o.procs)
    live = out.pids()
    first = live[0]
    joiners, rss, killed = [], [], set()
    t0 = time.monotonic()
    for k in range(o.kills):
        victim = random.choice([p for p in live if p != first])
        os.kill(victim, signal.SIGKILL)
        live.remove(victim)
        killed.add(victim)
        out.wait(r"elastic: shrink to", k + 1)
        j = subprocess.Popen([f"{o.bin}/chorus-run", "--join", join, "-n", "1"] + joining + example,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        jl = Lines(j)
        jl.wait(r"elastic: rank \d+ of \d+, pid", 1)
        live += jl.pids()
        joiners.append((j, jl))
        out.wait(r"elastic: grow to", k + 1)
        if k in (0, o.kills - 1):
            rss.append(rss_kib(first))
    took = time.monotonic() - t0
    open(stop, "w").close()  # every member stops at the same step, then checks its weights
    status = job.wait(timeout=60)
    # A joiner's chorus-run exits with 0, or with 137 where its process was one of the killed.
    joined = [j.wait(timeout=60) for j, _ in joiners]
    wrong = [st for (j, jl), st in zip(joiners, joined) if st != (137 if jl.pids()[0] in killed else 0)]
    out.wait(r"elastic: done steps=\d+ members=\d+ shrinks=\d+ grows=\d+ weights ok", 1)
    if status != 0 or wrong:
        raise SystemExit(f"chorus-run exited with {status}, the joiners with {joined}:\n" + "\n".join(l for l in out.lines if l))
    os.unlink(stop)
    if o.join_host:
        os.unlink(ssh)
    os.rmdir(d)
    shrinks, grows = out.count(r"elastic: shrink to"), out.count(r"elastic: grow to")
    times = [float(m.group(1)) for l in out.lines if l for m in [re.search(r"shrink to \d+ members in (\S+) ms", l)] if m]
    print([l for l in out.lines if l and "done steps" in l][0])
    print(f"{o.kills} kills in {took:.1f} s: {shrinks} shrinks, {grows} grows; shrink p50 {sorted(times)[len(times)//2]:.1f} ms,"
          f" max {max(times):.1f} ms; first process RSS {rss[0]} KiB after cycle 1, {rss[-1]} KiB after cycle {o.kills}")
    if shrinks != o.kills or grows != o.kills:
        raise SystemExit("the job did not shrink and grow each time")

if __name__ == "__main__":
    main()
