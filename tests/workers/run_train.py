"""A small torch training loop, run both by fuseopt.run (tests/workers/
run_driver.py) and as a fuseoptrun job (``python run_train.py``): the two
must give bit-identical weights."""
import hashlib
import sys


def train(steps=5):
    """Trains a small MLP on this rank's shard of a fixed dataset; returns
    (rank, size, sha256 of the final weights' bytes)."""
    import torch
    import fuseopt.torch as hvd
    hvd.init()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    data = torch.Generator().manual_seed(1)
    x = torch.randn(8 * hvd.size(), 6, generator=data)
    y = torch.randint(0, 3, (8 * hvd.size(),), generator=data)
    mine = slice(8 * hvd.rank(), 8 * (hvd.rank() + 1))
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x[mine]), y[mine]).backward()
        optimizer.step()
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
    rank, size = hvd.rank(), hvd.size()
    hvd.shutdown()
    return rank, size, digest.hexdigest()


if __name__ == "__main__":
    print("TRAINED %r" % (train(int(sys.argv[1]) if len(sys.argv) > 1 else 5),), flush=True)
