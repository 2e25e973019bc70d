"""``zerotorch.init_distributed``: DeepSpeed's ``deepspeed.init_distributed`` for a job started
by ztrun, torchrun, mpirun or srun."""

import datetime
import os

import torch

from . import _C


def launch_env():
    """This process's place in the job, as the C++ programs read it: rank, world_size,
    local_rank, local_world_size, launcher, master_addr, master_port."""
    return _C.launch_env()


def get_rank():
    """This process's rank in the job (DeepSpeed's ``deepspeed.comm.get_rank``)."""
    return _C.launch_env()["rank"]


def get_world_size():
    """The job's number of ranks (DeepSpeed's ``deepspeed.comm.get_world_size``)."""
    return _C.launch_env()["world_size"]


def init_distributed(dist_backend=None, auto_mpi_discovery=True, timeout=None,
                     init_method=None, dist_init_required=None, rank=-1, world_size=-1):
    """Creates torch.distributed's default process group, as DeepSpeed's does, so that
    ``torch.distributed.get_rank()`` and user collectives work next to the engine.

    The rank and world size come from the launcher's environment (ztrun and torchrun set RANK,
    WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE; mpirun and srun theirs), which is exported under
    torchrun's names when missing. The process group rendezvouses over the job's own store (the one
    the engine uses), so plain mpirun needs no MASTER_ADDR. The backend defaults to nccl when
    CUDA is available, else gloo. The engine itself does not need this call:
    ``zerotorch.initialize`` joins the job on its own.
    """
    import torch.distributed as dist

    if init_method is not None:
        raise ValueError("zerotorch.init_distributed: init_method is not supported; the job's "
                         "rendezvous comes from the launcher (ztrun, torchrun, mpirun, srun)")
    env = _C.launch_env()
    if (rank >= 0 and rank != env["rank"]) or (world_size > 0 and world_size != env["world_size"]):
        raise ValueError(
            f"zerotorch.init_distributed: rank {rank} / world_size {world_size} differ from the "
            f"launcher's {env['rank']} / {env['world_size']} ({env['launcher']})")
    # torchrun's names, as DeepSpeed's MPI discovery exports them. The C++ side reads them
    # together with OpenMPI's as the same rank (parallel/env.h), and a Slurm step's
    # rendezvous address travels as MASTER_ADDR/MASTER_PORT.
    if env["launcher"] != "none":
        for name, key in (("RANK", "rank"), ("WORLD_SIZE", "world_size"),
                          ("LOCAL_RANK", "local_rank"), ("LOCAL_WORLD_SIZE", "local_world_size")):
            os.environ.setdefault(name, str(env[key]))
        if env["master_addr"] and env["master_port"]:
            os.environ.setdefault("MASTER_ADDR", env["master_addr"])
            os.environ.setdefault("MASTER_PORT", str(env["master_port"]))
    if dist_init_required is False or dist.is_initialized():
        return
    backend = dist_backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl" and torch.cuda.is_available():
        # As DeepSpeed's init_distributed: the rank's own GPU becomes its current device, so
        # NCCL's communicators and the script's tensors land there.
        torch.cuda.set_device(env["local_rank"] % torch.cuda.device_count())
    timeout = timeout or datetime.timedelta(minutes=30)
    store = _C.job_store(timeout.total_seconds())
    dist.init_process_group(backend=backend, store=store, rank=env["rank"],
                            world_size=env["world_size"], timeout=timeout)
    # init_process_group put torch's excepthook over the package's job-stopping one.
    from .engine import install_excepthook
    install_excepthook()
