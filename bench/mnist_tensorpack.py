#!/usr/bin/env python3
"""tensorpack's MNIST convnet (examples/basics/mnist-convnet.py of tensorpack
0.11), the peer of Spire's main job (examples/mnist_convnet.cc) in
bench/mnist_vs_tensorpack.sh.

The model, data and training are tensorpack's: LinearWrap of Conv2D 3x3x32
(ReLU, SAME) -> MaxPooling 2 -> Conv2D -> Conv2D -> MaxPooling 2 -> Conv2D ->
FullyConnected 512 (ReLU) -> Dropout 0.5 -> FullyConnected 10; softmax cross
entropy plus 1e-5 L2 on the fc kernels; Adam at 1e-3 (tensorpack's
exponential_decay keeps 1e-3 for the first 10 epochs); BatchData(Mnist('train'),
128) through QueueInput; InferenceRunner with ScalarStats on the test set
after each epoch; SimpleTrainer. Parameter summaries (histograms) are left
out, as Spire's main job has none.

Prints, for the benchmark script to read:
  EPOCH <n> <seconds>             tensorpack's own epoch time (the training
                                  steps of the epoch, as its log line says)
  VALIDATION_ACCURACY <n> <acc>   after each epoch
Threads: --threads T gives TensorFlow T intra-op and T inter-op threads
(TensorFlow's own default on a T-core machine); --tensorpack-config keeps
tensorpack's default session config instead (1 intra-op thread, all cores
inter-op).
"""
import argparse
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="folder with MNIST's four .gz files")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps-per-epoch", type=int, default=0, help="0: one pass (468)")
    ap.add_argument("--logdir", required=True)
    ap.add_argument("--tensorpack-config", action="store_true",
                    help="tensorpack's default session config instead of T/T threads")
    args = ap.parse_args()

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    from tensorpack import (Callback, InferenceRunner, LinearWrap, ModelDesc, QueueInput,
                            ScalarStats, SimpleTrainer, TrainConfig, argscope,
                            launch_train_with_config, logger)
    from tensorpack.dataflow import BatchData, dataset
    from tensorpack.models import Conv2D, Dropout, FullyConnected, MaxPooling, regularize_cost
    from tensorpack.tfutils import get_current_tower_context, summary
    from tensorpack.tfutils.sesscreate import NewSessionCreator
    from tensorpack.tfutils.common import get_default_sess_config
    tf1 = tf.compat.v1

    class Model(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec((None, 28, 28), tf.float32, "input"),
                    tf.TensorSpec((None,), tf.int32, "label")]

        def build_graph(self, image, label):
            image = tf.expand_dims(image, 3)
            image = image * 2 - 1
            with argscope(Conv2D, kernel_size=3, activation=tf.nn.relu, filters=32):
                logits = (LinearWrap(image)
                          .Conv2D("conv0")
                          .MaxPooling("pool0", 2)
                          .Conv2D("conv1")
                          .Conv2D("conv2")
                          .MaxPooling("pool1", 2)
                          .Conv2D("conv3")
                          .FullyConnected("fc0", 512, activation=tf.nn.relu)
                          .Dropout("dropout", rate=0.5)
                          .FullyConnected("fc1", 10, activation=tf.identity)())
            tf.nn.softmax(logits, name="prob")
            cost = tf.nn.sparse_softmax_cross_entropy_with_logits(logits=logits, labels=label)
            cost = tf.reduce_mean(cost, name="cross_entropy_loss")
            correct = tf.cast(tf1.nn.in_top_k(predictions=logits, targets=label, k=1),
                              tf.float32, name="correct")
            accuracy = tf.reduce_mean(correct, name="accuracy")
            train_error = tf.reduce_mean(1 - correct, name="train_error")
            summary.add_moving_summary(train_error, accuracy)
            wd_cost = tf.multiply(1e-5, regularize_cost("fc.*/W", tf.nn.l2_loss),
                                  name="regularize_loss")
            total_cost = tf.add_n([wd_cost, cost], name="total_cost")
            summary.add_moving_summary(cost, wd_cost, total_cost)
            return total_cost

        def optimizer(self):
            lr = tf1.train.exponential_decay(
                learning_rate=1e-3, global_step=tf1.train.get_or_create_global_step(),
                decay_steps=468 * 10, decay_rate=0.3, staircase=True, name="learning_rate")
            return tf1.train.AdamOptimizer(lr)

    class Report(Callback):
        """Prints tensorpack's epoch time and the validation accuracy."""

        def _before_epoch(self):
            self._start = time.perf_counter()

        def _after_epoch(self):
            # Runs right after the epoch's last step, before the triggers
            # (InferenceRunner): the span tensorpack's "finished, time" covers.
            print("EPOCH %d %.4f" % (self.epoch_num, time.perf_counter() - self._start), flush=True)

        def _trigger_epoch(self):
            acc = self.trainer.monitors.get_latest("validation_accuracy")
            print("VALIDATION_ACCURACY %d %.5f" % (self.epoch_num, acc), flush=True)

    logger.set_logger_dir(args.logdir, action="k")
    train = BatchData(dataset.Mnist("train", dir=args.data), 128)
    test = BatchData(dataset.Mnist("test", dir=args.data), 256, remainder=True)
    conf = get_default_sess_config()
    if not args.tensorpack_config:
        conf.intra_op_parallelism_threads = args.threads
        conf.inter_op_parallelism_threads = args.threads
    config = TrainConfig(
        model=Model(),
        data=QueueInput(train),
        callbacks=[InferenceRunner(test, ScalarStats(["cross_entropy_loss", "accuracy"])),
                   Report()],
        session_creator=NewSessionCreator(config=conf),
        steps_per_epoch=args.steps_per_epoch or len(train),
        max_epoch=args.epochs,
    )
    launch_train_with_config(config, SimpleTrainer())
    return 0


if __name__ == "__main__":
    sys.exit(main())
