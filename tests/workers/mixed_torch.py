"""The PyTorch ranks of a mixed PyTorch + Keras job (see mixed_common.py);
started together with mixed_keras.py under one fuseoptrun (MPMD).

  train     both models: cross-framework broadcast, training, equality with
            the other ranks and with the NumPy reference;
  mismatch  the Linear weights mapped without their transpose: the name_map
            check in broadcast, then the core's gradient negotiation, must
            both fail with a clear error on every rank.
"""
import torch

import fuseopt.torch as hvd
from rank_harness import expect_error
import mixed_common as mc

torch.set_num_threads(1)


def build(model):
    sizes = mc.SIZES[model]
    layers = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        if i:
            layers.append(torch.nn.ReLU())
        layers.append(torch.nn.Linear(a, b))
    net = torch.nn.Sequential(*layers)
    # Sequential numbers its children: Linear layers sit at 0, 2, ...
    linear = [m for m in net if isinstance(m, torch.nn.Linear)]
    return net, linear


def name_map(model, net, transpose=True):
    """torch parameter name -> shared name. nn.Linear keeps weight as [out, in];
    the shared layout is [in, out], hence perm (1, 0)."""
    out = {}
    for idx, (layer, shared) in enumerate(zip([i for i, m in enumerate(net)
                                               if isinstance(m, torch.nn.Linear)],
                                              mc.layer_names(model))):
        out["%d.weight" % layer] = hvd.Shared(shared + ".kernel", perm=(1, 0) if transpose else None)
        out["%d.bias" % layer] = shared + ".bias"
    return out


def shared_weights(net, nmap):
    params = dict(net.named_parameters())
    out = {}
    for local, target in nmap.items():
        s = target if isinstance(target, hvd.Shared) else hvd.Shared(target)
        t = params[local].detach()
        out[s.name] = (t.permute(s.perm) if s.perm else t).numpy().copy()
    return out


def load_root_weights(net, nmap, model):
    weights = mc.root_weights(model)
    params = dict(net.named_parameters())
    with torch.no_grad():
        for local, target in nmap.items():
            s = target if isinstance(target, hvd.Shared) else hvd.Shared(target)
            value = torch.from_numpy(weights[s.name])
            params[local].copy_(value.permute(s.inverse) if s.perm else value)


def train(model, x, y):
    torch.manual_seed(100 + hvd.rank())  # a different start on every rank
    net, _ = build(model)
    nmap = name_map(model, net)
    if hvd.rank() == mc.ROOTS[model]:
        load_root_weights(net, nmap, model)
    hvd.broadcast_parameters(net.named_parameters(), root_rank=mc.ROOTS[model], name_map=nmap)
    mc.check_close(shared_weights(net, nmap), mc.root_weights(model), model + " after broadcast")
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=mc.LR),
                                   named_parameters=net.named_parameters(), name_map=nmap)
    xs, ys = mc.shard(x, hvd.rank(), hvd.size()), mc.shard(y, hvd.rank(), hvd.size())
    loss_fn = torch.nn.CrossEntropyLoss()
    for k in range(mc.STEPS):
        xb = torch.from_numpy(xs[k * mc.B:(k + 1) * mc.B])
        yb = torch.from_numpy(ys[k * mc.B:(k + 1) * mc.B])
        opt.zero_grad()
        loss_fn(net(xb), yb).backward()
        opt.step()
    weights = shared_weights(net, nmap)
    mc.check_everyone_holds(hvd, weights, model)
    mc.check_close(weights, mc.reference(model, x, y, hvd.size()), model + " vs reference")


def mismatch(x, y):
    net, _ = build("mlp")
    nmap = name_map("mlp", net, transpose=False)  # the deliberate mistake
    expect_error(hvd.MismatchError,
                 lambda: hvd.broadcast_parameters(net.named_parameters(), root_rank=2,
                                                  name_map=nmap),
                 "mlp.fc1.kernel", "ranks 0, 1 have float32[32,64]",
                 "ranks 2, 3 have float32[64,32]")
    # Past the broadcast check (say it was skipped), the gradients themselves
    # disagree: the core refuses them on every rank.
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=mc.LR),
                                   named_parameters=net.named_parameters(), name_map=nmap)
    loss = torch.nn.CrossEntropyLoss()(net(torch.from_numpy(x[:mc.B])),
                                       torch.from_numpy(y[:mc.B]))
    loss.backward()
    expect_error(hvd.MismatchError, opt.step, "tensor 'grad.mlp.fc", ".kernel'",
                 "ranks 0, 1 have allreduce float32[", "ranks 2, 3 have allreduce float32[")


if __name__ == "__main__":
    mc.run(hvd, "torch", {"train": lambda x, y: (train("logreg", x, y), train("mlp", x, y)),
                          "mismatch": mismatch})
