#!/usr/bin/env bash
# srun -n 4 on a one-machine Slurm this script starts for itself: munged, slurmctld and slurmd
# with a config of their own in a scratch folder (free ports, this user, no cgroups), then
# `srun -n 4 chorus-node-example`, which needs no chorus variable: the ranks meet through rank 0's
# rendezvous file (Config::from_env; Slurm's SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_NUM_NODES,
# SLURM_JOB_ID). Skips (exit 77) where Slurm is not installed (apt-get install slurm-wlm).
# With --python PYTHON PKG_DIR: `srun -n 3 PYTHON tests/python/one_host_job.py` instead, whose
# chorus.torch_api.init_process_group() meets the same way (a file store named by the job).
# usage: slurm_srun_test.sh BIN_DIR [--python PYTHON PKG_DIR]
set -uo pipefail
bin=${1:?usage: slurm_srun_test.sh BIN_DIR [--python PYTHON PKG_DIR]}
py=() pkg=""
if [ "${2:-}" = "--python" ]; then
  py=("${3:?--python needs PYTHON PKG_DIR}") pkg=${4:?--python needs PYTHON PKG_DIR}
fi
for p in munged slurmctld slurmd srun sinfo; do
  command -v "$p" >/dev/null || PATH=$PATH:/usr/sbin command -v "$p" >/dev/null ||
    { echo "SKIPPED: $p is not installed (apt-get install slurm-wlm)"; exit 77; }
done
export PATH=$PATH:/usr/sbin
d=$(mktemp -d /tmp/chorus-slurm.XXXXXX)
cleanup() {
  for f in "$d"/slurmd.pid "$d"/slurmctld.pid "$d"/munged.pid; do
    [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null
  done
  rm -rf "$d"
}
trap cleanup EXIT
fail() {
  echo "FAILED: $*"
  for l in "$d"/log/*; do echo "--- $l"; tail -20 "$l"; done
  exit 1
}
mkdir -p "$d/state" "$d/spool" "$d/log"
head -c 1024 /dev/urandom >"$d/munge.key" && chmod 600 "$d/munge.key"
munged --force --socket="$d/munge.sock" --key-file="$d/munge.key" --pid-file="$d/munged.pid" \
  --log-file="$d/log/munged.log" --seed-file="$d/munge.seed" || fail "munged did not start"
# Two free ports (the kernel's picks, let go at once).
read -r ctld_port slurmd_port < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("", 0))
print(*[s.getsockname()[1] for s in ss])')
host=$(hostname)
me=$(id -un)
cat >"$d/slurm.conf" <<CONF
ClusterName=choruscheck
SlurmctldHost=$host
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$me
SlurmdUser=$me
AuthType=auth/munge
AuthInfo=socket=$d/munge.sock
CredType=cred/munge
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=4 State=UNKNOWN
PartitionName=check Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
export SLURM_CONF=$d/slurm.conf
slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
slurmd -f "$SLURM_CONF" || fail "slurmd did not start"
for _ in $(seq 1 150); do  # up to 30 s for the node to be idle
  sinfo -h -o %t 2>/dev/null | grep -q idle && break
  sleep 0.2
done
sinfo -h -o %t 2>/dev/null | grep -q idle || fail "the Slurm node never became idle: $(sinfo 2>&1)"
if [ ${#py[@]} -gt 0 ]; then
  here=$(cd "$(dirname "$0")" && pwd)
  # (without XDG_RUNTIME_DIR the store file goes under TMPDIR, with the rest of this run)
  out=$(TMPDIR=$d PYTHONPATH=$pkg timeout 180 env -u XDG_RUNTIME_DIR srun -n 3 "${py[@]}" "$here/python/one_host_job.py" 2>&1)
  rc=$?
  echo "$out"
  [ $rc -eq 0 ] || fail "srun -n 3 python exited with $rc"
  for r in 0 1 2; do
    grep -q "rank $r of 3: init from the launcher, all_reduce ok" <<<"$out" || fail "rank $r did not report"
  done
  echo "srun -n 3 python: every rank ok"
  exit 0
fi
out=$(TMPDIR=$d timeout 120 srun -n 4 "$bin/chorus-node-example" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "srun -n 4 exited with $rc"
for r in 0 1 2 3; do
  grep -q "rank $r of 4: all_reduce ok, broadcast ok" <<<"$out" || fail "rank $r did not report"
done
echo "srun -n 4: every rank ok"
