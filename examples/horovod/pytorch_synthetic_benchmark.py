"""Throughput of an image model on synthetic data, written against
Horovod's PyTorch API and run here with only the import changed
(``import fuseopt.torch as hvd``).

What it exercises: hvd.init, SyncBatchNorm as the model's norm layer,
DistributedOptimizer with named_parameters, fp16 compression and the Adasum
op, broadcast_parameters and broadcast_optimizer_state, rank/size/local_size,
and the flags Horovod's users pass (--model, --batch-size,
--num-warmup-batches, --num-batches-per-iter, --num-iters,
--fp16-allreduce, --use-adasum, --no-cuda). The models come from
torchvision_models.py (stand-ins: torchvision has no CPU wheel here).

    fuseoptrun -np 2 python pytorch_synthetic_benchmark.py --model resnet18
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import fuseopt.torch as hvd
import torchvision_models as models


def parser(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", default="resnet50", help="a torchvision_models function")
    p.add_argument("--batch-size", type=int, default=32, help="images per rank and step")
    p.add_argument("--num-warmup-batches", type=int, default=10)
    p.add_argument("--num-batches-per-iter", type=int, default=10)
    p.add_argument("--num-iters", type=int, default=10)
    p.add_argument("--fp16-allreduce", action="store_true", help="allreduce in float16")
    p.add_argument("--use-adasum", action="store_true", help="Adasum instead of averaging")
    p.add_argument("--no-cuda", action="store_true", help="stay on the CPU")
    return p


def setup(args):
    """(model, DistributedOptimizer, step function, device name) on this rank."""
    hvd.init()
    cuda = not args.no_cuda and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(hvd.local_rank())
    model = getattr(models, args.model)(norm_layer=hvd.SyncBatchNorm)
    # Averaging grows the effective step with the ranks; Adasum does not
    # (except across the GPUs of a node, whose gradients it sums).
    scale = hvd.size() if not args.use_adasum else \
        (hvd.local_size() if cuda and hvd.nccl_built() else 1)
    if cuda:
        model.cuda()
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.01 * scale),
        named_parameters=model.named_parameters(),
        compression=hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none,
        op=hvd.Adasum if args.use_adasum else hvd.Average)
    images = torch.randn(args.batch_size, 3, 224, 224)
    labels = torch.randint(0, 1000, (args.batch_size,))
    if cuda:
        images, labels = images.cuda(), labels.cuda()

    def step():
        optimizer.zero_grad()
        F.cross_entropy(model(images), labels).backward()
        optimizer.step()
    return model, optimizer, step, "GPU" if cuda else "CPU"


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
    args = parser("PyTorch synthetic throughput, data parallel").parse_args()
    model, optimizer, step, device = setup(args)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    say("Model: %s, batch size %d per rank, %d %s(s)"
        % (args.model, args.batch_size, hvd.size(), device))
    for _ in range(args.num_warmup_batches):
        step()
    rates = []
    for i in range(args.num_iters):
        rates.append(rate(args, step))
        say("Iter #%d: %.1f img/sec per %s" % (i, rates[-1], device))
    report(rates, device)


if __name__ == "__main__":
    main()
