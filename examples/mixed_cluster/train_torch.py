"""The PyTorch half of a mixed job. Start both halves together:

    fuseoptrun -np 1 python examples/mixed_cluster/train_torch.py : \
               -np 1 python examples/mixed_cluster/train_keras.py
"""
import time

import numpy as np
import torch

import fuseopt.torch as hvd
from shared_model import BATCH, CLASSES, EPOCHS, HIDDEN, LR, ROOT, load

torch.set_num_threads(1)
hvd.init()
x, y, x_val, y_val = load(hvd.rank(), hvd.size())
steps = min(hvd.allgather_object(len(x) // BATCH))  # every rank runs the same steps

model = torch.nn.Sequential(torch.nn.Linear(64, HIDDEN), torch.nn.ReLU(),
                            torch.nn.Linear(HIDDEN, CLASSES))
# nn.Linear stores its weight as [out, in]; the shared layout is [in, out].
name_map = {"0.weight": hvd.Shared("fc1.kernel", perm=(1, 0)), "0.bias": "fc1.bias",
            "2.weight": hvd.Shared("fc2.kernel", perm=(1, 0)), "2.bias": "fc2.bias"}

hvd.broadcast_parameters(model.named_parameters(), root_rank=ROOT, name_map=name_map)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                               named_parameters=model.named_parameters(), name_map=name_map)
x, y = torch.from_numpy(x), torch.from_numpy(y)
for epoch in range(EPOCHS):
    t0 = time.perf_counter()
    for k in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x[k * BATCH:(k + 1) * BATCH]),
                                                 y[k * BATCH:(k + 1) * BATCH])
        loss.backward()
        opt.step()
    with torch.no_grad():
        acc = (model(torch.from_numpy(x_val)).argmax(1).numpy() == y_val).mean()
    print("[rank %d, PyTorch] epoch %d  loss %.3f  val acc %.3f  %.0f samples/s"
          % (hvd.rank(), epoch + 1, loss.item(), acc,
             steps * BATCH / (time.perf_counter() - t0)), flush=True)

weights = {"fc1.kernel": model[0].weight.detach().numpy().T, "fc2.kernel":
           model[2].weight.detach().numpy().T}
every = hvd.allgather_object(weights)
drift = max(float(np.abs(w[k] - weights[k]).max()) for w in every for k in weights)
print("[rank %d, PyTorch] largest weight difference to any rank: %.2g" % (hvd.rank(), drift),
      flush=True)
hvd.shutdown()
