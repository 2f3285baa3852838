"""A job started by srun or mpirun on one host with no MASTER_ADDR (tests/slurm_srun_test.sh
--python, ctest python_mpirun): chorus.torch_api.init_process_group() finds its ranks through a
file named by the launch, as chorus's C++ programs do, and the launcher's variables give every
rank, size and local figure."""
import os
import sys

import torch

from chorus import torch_api as comm


def launcher():
    """(rank, size, local rank) as the launcher numbers this process."""
    if "OMPI_COMM_WORLD_RANK" in os.environ:
        return tuple(int(os.environ[v]) for v in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                                  "OMPI_COMM_WORLD_LOCAL_RANK"))
    return tuple(int(os.environ[v]) for v in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"))


def main():
    assert "MASTER_ADDR" not in os.environ, "the test is of a job without MASTER_ADDR"
    comm.init_process_group()
    r, n = comm.get_rank(), comm.get_world_size()
    want_rank, want_size, want_local = launcher()
    assert (r, n) == (want_rank, want_size), (r, n)
    assert comm.get_local_rank() == want_local, comm.get_local_rank()
    assert comm.get_local_size() == n, comm.get_local_size()  # one host: every rank's host is this one
    t = torch.full((1001,), float(r + 1))
    comm.allreduce_inplace(t, op=comm.ReduceOp.SUM)
    want = n * (n + 1) / 2
    assert torch.all(t == want), f"all_reduce gave {t[:4].tolist()}, not {want}"
    comm.barrier()
    print(f"rank {r} of {n}: init from the launcher, all_reduce ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
