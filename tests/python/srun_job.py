"""A job started by srun on one host with no MASTER_ADDR (tests/slurm_srun_test.sh --python):
chorus.torch_api.init_process_group() finds its ranks through a file named by the Slurm job, as
chorus's C++ programs do, and Slurm's variables give every rank, size and local figure."""
import os
import sys

import torch

from chorus import torch_api as comm


def main():
    assert "MASTER_ADDR" not in os.environ, "the test is of a job without MASTER_ADDR"
    comm.init_process_group()
    r, n = comm.get_rank(), comm.get_world_size()
    assert (r, n) == (int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])), (r, n)
    assert comm.get_local_rank() == int(os.environ["SLURM_LOCALID"]), comm.get_local_rank()
    assert comm.get_local_size() == n, comm.get_local_size()  # one host: every rank's host is this one
    t = torch.full((1001,), float(r + 1))
    comm.allreduce_inplace(t, op=comm.ReduceOp.SUM)
    want = n * (n + 1) / 2
    assert torch.all(t == want), f"all_reduce gave {t[:4].tolist()}, not {want}"
    comm.barrier()
    print(f"rank {r} of {n}: init from Slurm, all_reduce ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
