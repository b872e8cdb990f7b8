"""The ``curvature`` command: a model and its data set (a factory, or a Hugging Face model and a
token file), on one process or as many as ``torchrun`` / ``srun`` start (``torch.distributed``,
env://: gloo on CPUs, NCCL on GPUs); rank 0 writes ``curvature.json`` (the run's numbers),
``eigenvectors.pt`` (with ``--eigenvectors``) and ``curvature.png``, and prints progress.

    torchrun --nproc-per-node 2 -m transformer_hessian curvature --factory mymodule:build --out runs/c
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path

__all__ = ["add_parser", "first_host", "launch_env", "main"]


def add_parser(sub, json_arg) -> None:
    """The ``curvature`` subcommand on ``sub`` (``json_arg``: the package's JSON / @FILE argument type)."""
    s = sub.add_parser(
        "curvature",
        help="top eigenvalues, trace, SLQ density and per-block norms of a model's Hessian over a data set "
        "(one process, or many under torchrun / srun)",
    )
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument("--factory", help="module:function returning (model, batches): the whole data set")
    src.add_argument("--hf-model", help="Hugging Face folder (config.json, weights if present) or a config.json")
    s.add_argument("--factory-args", type=json_arg, default={}, help="keyword arguments of the factory (JSON or @FILE)")
    s.add_argument("--tokens", help="with --hf-model: token ids (.pt, .npy, or nanoGPT's uint16 .bin)")
    s.add_argument("--seq-len", type=int, default=128, help="with --hf-model: tokens a sequence")
    s.add_argument("--batch-size", type=int, default=4, help="with --hf-model: sequences a batch")
    s.add_argument("--max-batches", type=int, default=None, help="with --hf-model: the first N batches only")
    s.add_argument("--loss", default="causal_lm", help="causal_lm (default), cross_entropy or mse")
    s.add_argument("--params", nargs="+", default=None, help="parameter names or globs (default: all)")
    s.add_argument("--blocks", nargs="+", default=[], help="parameter globs: each block's spectral norm and trace")
    s.add_argument("--dtype", choices=["float64", "float32", "bfloat16"], default=None, help="cast the model")
    s.add_argument("--device", default="auto", help="auto (cuda:LOCAL_RANK when there is a GPU), cpu or cuda")
    s.add_argument("--top-k", type=int, default=5, help="largest eigenvalues")
    s.add_argument("--lanczos-steps", type=int, default=20, help="Lanczos steps (products)")
    s.add_argument("--slq-probes", type=int, default=4, help="Lanczos start vectors (SLQ probes), swept together")
    s.add_argument("--probes", type=int, default=32, help="Hutchinson probes of the trace")
    s.add_argument("--block-steps", type=int, default=12, help="Lanczos steps a block")
    s.add_argument("--block-probes", type=int, default=8, help="Hutchinson probes a block")
    s.add_argument("--eigenvectors", action="store_true", help="also write the top-k eigenvectors (eigenvectors.pt)")
    s.add_argument("--checkpoint-every", type=int, default=5, help="products between saves of the state (0: never)")
    s.add_argument("--seed", type=int, default=0, help="seed of every random vector (the same on every process)")
    s.add_argument("--keep", choices=["auto", "yes", "no"], default="auto", help="keep each batch's values")
    s.add_argument("--out", required=True, help="folder for curvature.json, eigenvectors.pt, curvature.png")
    s.set_defaults(func=main)


def launch_env(env: dict) -> dict:
    """The env:// variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) of this
    process: torchrun's as set, else those of a task that ``srun -n N`` started (SLURM_PROCID,
    SLURM_NTASKS, SLURM_LOCALID; the first node of the step as the master, a port from the job id),
    else one process."""
    if "WORLD_SIZE" in env or "SLURM_PROCID" not in env or int(env.get("SLURM_NTASKS", "1")) <= 1:
        return {}
    nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or "127.0.0.1"
    return {
        "RANK": env["SLURM_PROCID"],
        "WORLD_SIZE": env["SLURM_NTASKS"],
        "LOCAL_RANK": env.get("SLURM_LOCALID", "0"),
        "MASTER_ADDR": env.get("MASTER_ADDR") or first_host(nodes),
        "MASTER_PORT": env.get("MASTER_PORT") or str(20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000),
    }


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list (``node[03-05,7],gpu1`` -> ``node03``)."""
    head = nodelist.split(",")[0] if "[" not in nodelist.split(",")[0] else nodelist[: nodelist.index("]") + 1]
    if "[" not in head:
        return head
    prefix, _, rng = head.partition("[")
    return prefix + rng.rstrip("]").split(",")[0].split("-")[0]


def _distributed(device_arg: str):
    """(rank, world, device): torch.distributed initialised from env:// (torchrun's, or srun's
    mapped by :func:`launch_env`) when there is more than one process."""
    import torch
    import torch.distributed as dist

    os.environ.update(launch_env(dict(os.environ)))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device_arg == "auto":
        device = torch.device(f"cuda:{local}" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(device_arg)
        if device.type == "cuda" and device.index is None:
            device = torch.device(f"cuda:{local}")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=timedelta(minutes=30))
    return rank, world, device


def main(a) -> None:
    """Run the command on parsed arguments ``a``."""
    import torch

    from ..util.io import write_json
    from . import sources
    from .run import Settings, curvature

    rank, world, device = _distributed(a.device)
    try:
        if a.factory:
            model, batches = sources.from_factory(a.factory, a.factory_args)
        else:
            if not a.tokens:
                raise ValueError("--hf-model needs --tokens (the data set's token ids)")
            model = sources.hugging_face(a.hf_model, a.seed)
            batches = sources.token_batches(sources.read_tokens(a.tokens), a.seq_len, a.batch_size, a.max_batches)
        if a.dtype:
            model = model.to(sources.DTYPES[a.dtype])
        model = model.to(device).eval()
        mine = sources.to_device(sources.share(batches, rank, world), device)
        settings = Settings(
            top_k=a.top_k, lanczos_steps=a.lanczos_steps, slq_probes=a.slq_probes, probes=a.probes,
            blocks=tuple(a.blocks), block_steps=a.block_steps, block_probes=a.block_probes,
            eigenvectors=a.eigenvectors, seed=a.seed, checkpoint_every=a.checkpoint_every,
            params=tuple(a.params) if a.params else None, loss=a.loss,
        )  # fmt: skip
        keep = {"auto": None, "yes": True, "no": False}[a.keep]
        if rank == 0:
            print(
                f"curvature: {len(batches)} batches on {world} process(es), {device}, "
                f"{sum(p.numel() for p in model.parameters()):,} parameters",
                file=sys.stderr,
                flush=True,
            )
        res = curvature(model, mine, settings, a.out, keep=keep)
        res["processes"] = world
        if rank == 0:
            out = Path(a.out)
            out.mkdir(parents=True, exist_ok=True)
            vectors = res.pop("_vectors", None)
            names, shapes = res.pop("_names", None), res.pop("_shapes", None)
            if vectors is not None:
                from ..util.files import torch_save

                torch_save(
                    {"names": names, "shapes": shapes, "eigenvalues": res["eigenvalues"], "vectors": vectors.cpu()},
                    out / "eigenvectors.pt",
                )
            write_json(res, out / "curvature.json")
            from .figure import draw

            draw(res, out / "curvature.png")
            print(
                f"curvature: wrote {out / 'curvature.json'}: top {json.dumps(res['eigenvalues'][:3])}", file=sys.stderr
            )
    finally:
        import torch.distributed as dist

        if world > 1 and dist.is_initialized():
            dist.destroy_process_group()
    del torch
