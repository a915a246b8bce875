"""Elastic PyTorch training on scikit-learn's digits: survives lost hosts and
grows onto new ones (docs/reliability.md, "Elastic training").

    fuseoptrun -np 4 --min-np 2 --max-np 8 --host-discovery-script ./hosts.sh \
        python examples/elastic_torch.py

``hosts.sh`` prints one ``host:slots`` line per usable host. On a lost host,
or when discovery finds new hosts, fuseoptrun restarts the job on the hosts it
has; the script then runs again from the top, and ``train`` resumes from the
last commit: model, optimizer, the epoch and which samples it has seen.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits

import fuseopt.torch as hvd

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--batch-size", type=int, default=16, help="per rank")
p.add_argument("--batches-per-commit", type=int, default=10)
p.add_argument("--lr", type=float, default=0.02, help="per rank: scaled by size()")
args = p.parse_args()

hvd.init()
x, y = load_digits(return_X_y=True)
data = torch.utils.data.TensorDataset(torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y))
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9),
    named_parameters=model.named_parameters())
# Shares the epoch's samples over the ranks, remembers which were processed,
# and re-shards the rest over the new ranks after a reset.
sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=42)
loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, sampler=sampler)


def on_state_reset():
    # Each rank keeps its batch size, so the learning rate follows the number of ranks.
    for group in optimizer.param_groups:
        group["lr"] = args.lr * hvd.size()


state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0)
state.register_reset_callbacks([on_state_reset])


@hvd.elastic.run
def train(state):
    while state.epoch < args.epochs:
        for batch_idx, (xb, yb) in enumerate(loader):
            optimizer.zero_grad()
            loss = F.cross_entropy(state.model(xb), yb)
            loss.backward()
            optimizer.step()
            state.sampler.record_batch(batch_idx, args.batch_size)
            if batch_idx % args.batches_per_commit == args.batches_per_commit - 1:
                state.commit()  # may raise HostsUpdatedInterrupt: run() takes care of it
        if hvd.rank() == 0:
            print("epoch %d on %d ranks: loss %.3f" % (state.epoch, hvd.size(), loss.item()),
                  flush=True)
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)  # at the end: a reset mid-epoch repeats nothing
        state.commit()


train(state)
with torch.no_grad():
    accuracy = (model(data.tensors[0]).argmax(1) == data.tensors[1]).float().mean().item()
if hvd.rank() == 0:
    print("final training accuracy %.3f on %d ranks" % (accuracy, hvd.size()))
hvd.shutdown()
