"""The Keras ranks of a mixed PyTorch + Keras job (see mixed_common.py and
mixed_torch.py, which runs the same scenarios on the PyTorch ranks).

logreg trains with model.fit and takes its initial weights from the PyTorch
root through BroadcastGlobalVariablesCallback(name_map=...); mlp is the
Keras root, broadcasts with broadcast_variables(name_map=...), and trains in
a custom loop with DistributedGradientTape(name_map=...)."""

from tf_common import hvd, keras, tf
from rank_harness import expect_error
import mixed_common as mc


def build(model):
    sizes = mc.SIZES[model]
    layers = [keras.Input((sizes[0],))]
    for i, b in enumerate(sizes[1:]):
        last = i == len(sizes) - 2
        layers.append(keras.layers.Dense(b, activation=None if last else "relu",
                                         name="fc%d" % (i + 1)))
    return keras.Sequential(layers, name=model)


def name_map(model):
    """Keras variable path -> shared name: Dense kernels are already [in, out]."""
    return {"%s/fc%d/%s" % (model, i + 1, kind): "%s.fc%d.%s" % (model, i + 1, kind)
            for i in range(len(mc.SIZES[model]) - 1) for kind in ("kernel", "bias")}


def shared_weights(net, nmap):
    return {nmap[v.path]: v.numpy().copy() for v in net.variables}


def load_root_weights(net, nmap, model):
    weights = mc.root_weights(model)
    for v in net.variables:
        v.assign(weights[nmap[v.path]])


def loss_fn():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def train_logreg_with_fit(x, y):
    model, net = "logreg", build("logreg")
    nmap = name_map(model)
    xs, ys = mc.shard(x, hvd.rank(), hvd.size()), mc.shard(y, hvd.rank(), hvd.size())
    net.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(mc.LR), name_map=nmap),
                loss=loss_fn())
    net.fit(xs, ys, batch_size=mc.B, epochs=1, shuffle=False, verbose=0,
            callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(mc.ROOTS[model],
                                                                      name_map=nmap)])
    weights = shared_weights(net, nmap)
    mc.check_everyone_holds(hvd, weights, model)
    mc.check_close(weights, mc.reference(model, x, y, hvd.size()), model + " vs reference")


def train_mlp_with_tape(x, y):
    model, net = "mlp", build("mlp")
    nmap = name_map(model)
    if hvd.rank() == mc.ROOTS[model]:
        load_root_weights(net, nmap, model)
    hvd.broadcast_variables(net.variables, root_rank=mc.ROOTS[model], name_map=nmap)
    mc.check_close(shared_weights(net, nmap), mc.root_weights(model), model + " after broadcast")
    opt = keras.optimizers.SGD(mc.LR)
    xs, ys = mc.shard(x, hvd.rank(), hvd.size()), mc.shard(y, hvd.rank(), hvd.size())

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn()(yb, net(xb, training=True))
        tape = hvd.DistributedGradientTape(tape, name_map=nmap)
        grads = tape.gradient(loss, net.trainable_variables)
        opt.apply(grads, net.trainable_variables)

    for k in range(mc.STEPS):
        step(xs[k * mc.B:(k + 1) * mc.B], ys[k * mc.B:(k + 1) * mc.B])
    weights = shared_weights(net, nmap)
    mc.check_everyone_holds(hvd, weights, model)
    mc.check_close(weights, mc.reference(model, x, y, hvd.size()), model + " vs reference")


def mismatch(x, y):
    net = build("mlp")
    nmap = name_map("mlp")
    expect_error(hvd.MismatchError,
                 lambda: hvd.broadcast_variables(net.variables, root_rank=2, name_map=nmap),
                 "mlp.fc1.kernel", "ranks 0, 1 have float32[32,64]",
                 "ranks 2, 3 have float32[64,32]")
    with tf.GradientTape() as tape:
        loss = loss_fn()(y[:mc.B], net(x[:mc.B]))
    tape = hvd.DistributedGradientTape(tape, name_map=nmap)
    expect_error(hvd.MismatchError, lambda: tape.gradient(loss, net.trainable_variables),
                 "tensor 'grad.mlp.fc", ".kernel'", "ranks 0, 1 have allreduce float32[",
                 "ranks 2, 3 have allreduce float32[")


if __name__ == "__main__":
    mc.run(hvd, "keras", {"train": lambda x, y: (train_logreg_with_fit(x, y),
                                                  train_mlp_with_tape(x, y)),
                          "mismatch": mismatch})
