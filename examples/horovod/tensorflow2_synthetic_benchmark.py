"""Throughput of a Keras application model trained with a custom
tf.function loop, written against Horovod's TensorFlow API and run here with
only the import changed (``import fuseopt.tensorflow as hvd``).

It exercises what Horovod's TF2 benchmark users rely on: hvd.init,
DistributedGradientTape with optional fp16 compression, broadcast_variables
of the model and optimizer after the first step, rank/size, and the same
command-line flags (--model, --batch-size, --num-warmup-batches,
--num-batches-per-iter, --num-iters, --fp16-allreduce, --no-cuda).
"""
import argparse
import statistics
import time

import tensorflow as tf

import fuseopt.tensorflow as hvd


def parser(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", default="ResNet50", help="a tf.keras.applications model")
    p.add_argument("--batch-size", type=int, default=32, help="images per rank and step")
    p.add_argument("--num-warmup-batches", type=int, default=10)
    p.add_argument("--num-batches-per-iter", type=int, default=10)
    p.add_argument("--num-iters", type=int, default=10)
    p.add_argument("--fp16-allreduce", action="store_true", help="allreduce in float16")
    p.add_argument("--no-cuda", action="store_true", help="stay on the CPU")
    return p


def setup(args):
    """(model, optimizer, train_step(first), device) on this rank's device."""
    hvd.init()
    gpus = [] if args.no_cuda else tf.config.list_physical_devices("GPU")
    if gpus:  # one device per local rank
        tf.config.set_visible_devices(gpus[hvd.local_rank() % len(gpus)], "GPU")
    device = "GPU" if gpus else "CPU"

    model = getattr(tf.keras.applications, args.model)(weights=None)
    optimizer = tf.keras.optimizers.SGD(0.01)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    images = tf.random.uniform([args.batch_size, 224, 224, 3])
    labels = tf.random.uniform([args.batch_size, 1], maxval=999, dtype=tf.int64)

    @tf.function
    def train_step(first):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
                labels, model(images, training=True)))
        tape = hvd.DistributedGradientTape(tape, compression=compression)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        if first:  # the optimizer's variables exist only after its first step
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(optimizer.variables, root_rank=0)
    return model, optimizer, train_step, device


def say(text):
    if hvd.rank() == 0:
        print(text, flush=True)


def rate(args, step):
    """Images per second of one iteration (num_batches_per_iter steps)."""
    start = time.perf_counter()
    for _ in range(args.num_batches_per_iter):
        step()
    return args.batch_size * args.num_batches_per_iter / (time.perf_counter() - start)


def report(rates, device):
    mean = statistics.mean(rates)
    spread = 1.96 * statistics.pstdev(rates)
    say("Img/sec per %s: %.1f +-%.1f" % (device, mean, spread))
    say("Total img/sec on %d %s(s): %.1f +-%.1f"
        % (hvd.size(), device, hvd.size() * mean, hvd.size() * spread))


def main():
    args = parser("TF2 synthetic throughput, data parallel").parse_args()
    model, optimizer, train_step, device = setup(args)
    say("Model: %s, batch size %d per rank, %d %s(s)"
        % (args.model, args.batch_size, hvd.size(), device))
    with tf.device(device):
        train_step(True)
        for _ in range(args.num_warmup_batches):
            train_step(False)
        rates = []
        for i in range(args.num_iters):
            rates.append(rate(args, lambda: train_step(False)))
            say("Iter #%d: %.1f img/sec per %s" % (i, rates[-1], device))
    report(rates, device)


if __name__ == "__main__":
    main()
