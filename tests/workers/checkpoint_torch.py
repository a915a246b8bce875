"""Trains a small model with checkpoints; can be killed mid-way and resumed.

Usage: checkpoint_torch.py DIR TAG STEPS [--kill-at S] [--every E]
                           [--global-batch G] [--dropout P] [--keep RULE]

Samples are drawn by global index (step * G ...), and each rank takes an
equal contiguous slice of the global batch (fuseopt.training.checkpoint.shard), so a
run resumed on another number of ranks sees the same global batches. Rank 0
writes DIR/final-TAG.pt with the final weights."""
import argparse
import os
import shutil
import signal

import numpy as np
import torch

import fuseopt.torch as hvd
from fuseopt.training import checkpoint as ckpt_rules

DATA = np.random.default_rng(0)
X = torch.tensor(DATA.normal(size=(8192, 20)), dtype=torch.float32)
Y = torch.tensor(DATA.integers(0, 4, size=8192))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("tag")
    p.add_argument("steps", type=int)
    p.add_argument("--kill-at", type=int, default=-1)
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--global-batch", type=int, default=32)
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--keep", default="global_batch")
    p.add_argument("--copy-at", type=int, default=-1,
                   help="after saving at this step, also copy the checkpoint to ckpt-<step>.pt")
    args = p.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(1234 + hvd.rank())  # ranks differ until the broadcast / restore
    model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(),
                                torch.nn.Dropout(args.dropout), torch.nn.Linear(32, 4))
    base_lr = 0.01
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=base_lr),
                                   named_parameters=model.named_parameters())
    path = os.path.join(args.dir, "ckpt.pt")
    resumed = hvd.load_checkpoint(path, model, opt, missing_ok=True)
    if resumed is None:
        start = 0
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
    else:
        start = resumed.step + 1
        scale = resumed.lr_scale(keep=args.keep)
        for group in opt.param_groups:
            group["lr"] = base_lr * scale
        print("[rank %d] resumed at step %d from %d ranks on %d; lr scale %.2f"
              % (hvd.rank(), start, resumed.world_size, hvd.size(), scale), flush=True)
        assert resumed.extra["samples_seen"] == start * resumed.extra["global_batch"]
    # With keep=per_rank_batch each rank keeps its old batch and the global batch changes.
    global_batch = args.global_batch
    if resumed is not None and args.keep == "per_rank_batch":
        global_batch = args.global_batch // resumed.world_size * hvd.size()
    for step in range(start, args.steps):
        if step == args.kill_at and hvd.rank() == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        lo, hi = ckpt_rules.shard((step * global_batch) % 8192, global_batch)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(X[lo:hi]), Y[lo:hi])
        loss.backward()
        opt.step()
        if (step + 1) % args.every == 0:
            hvd.save_checkpoint(path, model, opt, step=step,
                                extra={"samples_seen": (step + 1) * global_batch,
                                       "global_batch": global_batch})
            if step + 1 == args.copy_at and hvd.rank() == 0:
                shutil.copy(path, os.path.join(args.dir, "ckpt-%d.pt" % args.copy_at))
    if hvd.rank() == 0:
        torch.save(model.state_dict(), os.path.join(args.dir, "final-%s.pt" % args.tag))
    print("[rank %d] done at step %d, loss %.4f" % (hvd.rank(), args.steps, loss.item()),
          flush=True)


if __name__ == "__main__":
    main()
