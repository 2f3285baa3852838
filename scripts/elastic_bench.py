#!/usr/bin/python3
"""The elastic issue's timings on this machine (docs/elastic.md, "Measured").

  scripts/elastic_bench.py [--nodes 8] [--trials 20] [--bin build/bin]

1. shrink: --nodes node processes of one peer (chorus-test-node, scenario shrink-after-kill) under
   a chorus-orchestrator daemon; in trial t the rank t % nodes SIGKILLs itself inside an all-reduce.
   Each survivor says how long from the op's failure to its first all-reduce done in the shrunk
   world; a trial's time is its slowest survivor's. Every survivor must then finish its checked ops.
2. relaunch: what the job would cost instead. The kill: a job of --nodes chorus-elastic-example
   processes under chorus-run (not elastic), one SIGKILLed mid-training, until chorus-run has
   ended the others and exited. The launch: chorus-run -n (nodes - 1) chorus-node-example, from its
   start to its end (processes started, joined, one all-reduce and one broadcast, exit).
3. grow: nodes - 1 members (scenario grow) all-reduce until they know of a newcomer, then grow;
   the newcomer says how long from its registration to its Peer in the grown world.
"""
import argparse, os, re, shutil, signal, statistics, subprocess, sys, tempfile, time

def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(p / 100.0 * len(s) + 0.5)) - 1))]

def daemon(bin_dir, nodes):
    d = subprocess.Popen([f"{bin_dir}/chorus-orchestrator", "--port", "0", "--nodes", str(nodes)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in d.stdout:
        m = re.search(r"listening on (\S+):(\d+)", line)
        if m:
            return d, f"127.0.0.1:{m.group(2)}"
    raise SystemExit("the orchestrator did not start")

def nodes_of(bin_dir, orch, n, extra):
    return [subprocess.Popen([f"{bin_dir}/chorus-test-node", "--orchestrator", orch, "--nodes", str(n),
                              "--peers", "1", "--timeout-ms", "10000"] + extra,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(n)]

def shrink(bin_dir, n, trials):
    d, orch = daemon(bin_dir, n)
    times = []
    try:
        for t in range(trials):
            procs = nodes_of(bin_dir, orch, n, ["--scenario", "shrink-after-kill", "--victim", str(t % n),
                                                "--at-op", "5", "--ops", "5", "--elements", "1000"])
            out = [p.communicate(timeout=120)[0] for p in procs]
            shrunk = [float(m.group(1)) for o in out for m in re.finditer(r"SHRUNK \d+ \d+ \d+ (\S+)", o)]
            ok = sum(len(re.findall(r"PEER \d+ OK 5", o)) for o in out)
            if len(shrunk) != n - 1 or ok != n - 1:
                raise SystemExit(f"trial {t}: {len(shrunk)} survivors shrank, {ok} finished:\n" + "\n".join(out))
            times.append(max(shrunk))
    finally:
        d.terminate()
        d.wait()
    return times

def teardown(bin_dir, n, trials):
    times = []
    for _ in range(trials):
        job = subprocess.Popen([f"{bin_dir}/chorus-run", "-n", str(n), "--tag-output", f"{bin_dir}/chorus-elastic-example",
                                "--steps", "1000000", "--step-ms", "2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        pids = []
        for line in job.stdout:
            m = re.search(r"elastic: rank \d+ of \d+, pid (\d+)", line)
            if m:
                pids.append(int(m.group(1)))
                if len(pids) == n:
                    break
        t0 = time.monotonic()
        os.kill(pids[n // 2], signal.SIGKILL)
        job.communicate(timeout=60)
        times.append((time.monotonic() - t0) * 1000)
    return times

def relaunch(bin_dir, n, trials):
    times = []
    for _ in range(trials):
        t0 = time.monotonic()
        r = subprocess.run([f"{bin_dir}/chorus-run", "-n", str(n), f"{bin_dir}/chorus-node-example"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        if r.returncode != 0:
            raise SystemExit("relaunch failed:\n" + r.stdout)
        times.append((time.monotonic() - t0) * 1000)
    return times

def grow(bin_dir, n, trials):
    d, orch = daemon(bin_dir, n)
    joined, grew = [], []
    try:
        for _ in range(trials):
            members = nodes_of(bin_dir, orch, n, ["--scenario", "grow", "--elastic", "1", "--ops", "5", "--elements", "1000"])
            ready = 0
            for p in members:  # each says READY once the job runs
                for line in p.stdout:
                    if "READY" in line:
                        ready += 1
                        break
            newcomer = nodes_of(bin_dir, orch, 1, ["--scenario", "grow", "--newcomer", "1", "--ops", "5", "--elements", "1000",
                                                   "--nodes", str(n)])[0]
            out = [p.communicate(timeout=120)[0] for p in members + [newcomer]]
            j = [float(m.group(1)) for m in re.finditer(r"JOINED \d+ (\S+)", out[-1])]
            g = [float(m.group(1)) for o in out for m in re.finditer(r"GREW \d+ \d+ (\S+)", o)]
            if ready != n or len(j) != 1 or len(g) != n:
                raise SystemExit("grow failed:\n" + "\n".join(out))
            joined.append(j[0])
            grew.append(max(g))
    finally:
        d.terminate()
        d.wait()
    return joined, grew

def show(name, v):
    print(f"{name:42s} p50 {statistics.median(v):8.1f} ms   p99 {pct(v, 99):8.1f} ms   max {max(v):8.1f} ms   (n={len(v)})")

def main():
    a = argparse.ArgumentParser()
    a.add_argument("--nodes", type=int, default=8)
    a.add_argument("--trials", type=int, default=20)
    a.add_argument("--bin", default="build/bin")
    o = a.parse_args()
    # The flight recorders every failing op writes (7 a trial) go to a folder of the bench's own,
    # removed at the end, rather than piling up in /tmp.
    flights = tempfile.mkdtemp(prefix="chorus-elastic-bench-")
    os.environ["CHORUS_FLIGHT_DIR"] = flights
    try:
        run(o)
    finally:
        shutil.rmtree(flights, ignore_errors=True)

def run(o):
    s = shrink(o.bin, o.nodes, o.trials)
    show(f"shrink of {o.nodes} after a SIGKILL, to the next op done", s)
    k = teardown(o.bin, o.nodes, max(5, o.trials // 4))
    show(f"kill of a job of {o.nodes}, to chorus-run's exit", k)
    r = relaunch(o.bin, o.nodes - 1, max(5, o.trials // 4))
    show(f"launch of {o.nodes - 1} (chorus-run, join, one op, exit)", r)
    both = statistics.median(k) + statistics.median(r)
    print(f"{'kill and relaunch / shrink (medians)':42s} {both / statistics.median(s):8.1f}x")
    j, g = grow(o.bin, o.nodes - 1, max(5, o.trials // 4))
    show(f"grow of 1 into {o.nodes - 1}: registration to Peer", j)
    show(f"grow of 1 into {o.nodes - 1}: the members' grow()", g)

if __name__ == "__main__":
    main()
