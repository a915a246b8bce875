"""tensorflow2_synthetic_benchmark.py under Horovod's elastic API, run here
with only the import changed: ranks may come and go, and the benchmark
resumes from the last commit.

What it exercises on top of the plain benchmark:
hvd.elastic.TensorFlowKerasState with the model, the optimizer and plain
values (the rates so far, the iteration, the batch, whether warm-up is done),
commit() every --num-batches-per-commit steps and after each iteration,
register_reset_callbacks (the learning rate follows size()), and
@hvd.elastic.run. The state's sync replaces the plain benchmark's broadcast
after the first step.

    fuseoptrun -np 2 --min-np 1 --max-np 2 python tensorflow2_synthetic_benchmark_elastic.py
"""
import tensorflow as tf

import fuseopt.tensorflow as hvd
from tensorflow2_synthetic_benchmark import parser, rate, report, say, setup


def main():
    p = parser("TF2 synthetic throughput, elastic")
    p.add_argument("--num-batches-per-commit", type=int, default=1)
    args = p.parse_args()
    model, optimizer, train_step, device = setup(args)
    optimizer.build(model.trainable_variables)  # its variables are part of the state
    state = hvd.elastic.TensorFlowKerasState(model, optimizer, img_secs=[], iter=0, batch=0,
                                             warm=False)

    def step():
        train_step(False)
        state.batch += 1
        if state.batch == args.num_batches_per_commit:
            state.batch = 0
            state.commit()

    def after_reset():
        optimizer.learning_rate.assign(0.01 * hvd.size())

    state.register_reset_callbacks([after_reset])

    @hvd.elastic.run
    def run(state):
        if not state.warm:
            for _ in range(args.num_warmup_batches):
                step()
            state.warm = True
            state.commit()
        for i in range(state.iter, args.num_iters):
            state.img_secs.append(rate(args, step))
            say("Iter #%d: %.1f img/sec per %s" % (i, state.img_secs[-1], device))
            state.iter = i + 1
            state.commit()

    say("Model: %s, batch size %d per rank, %d %s(s)"
        % (args.model, args.batch_size, hvd.size(), device))
    with tf.device(device):
        run(state)
    report(state.img_secs, device)


if __name__ == "__main__":
    main()
