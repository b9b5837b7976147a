#!/usr/bin/env python3
"""Reads a TensorBoard event file with the `tensorboard` package (no TensorFlow
needed) and prints what it found, one line per item, tab-separated:

    file_version <TAB> <version>
    scalar <TAB> <step> <TAB> <tag> <TAB> <value repr> <TAB> <wall_time repr>

Used by tests/train/event_writer_test.cc to check that Spire's event files are
readable by TensorBoard itself. Exit status 2 when tensorboard is missing.
"""
import sys


def main():
    if len(sys.argv) != 2:
        print("usage: read_events.py EVENT_FILE", file=sys.stderr)
        return 2
    try:
        from tensorboard.backend.event_processing import event_file_loader
        from tensorboard.util import tensor_util
    except ImportError as e:
        print("tensorboard is not installed: %s" % e, file=sys.stderr)
        return 2
    # EventFileLoader is what TensorBoard's backend uses; it migrates
    # simple_value summaries into scalar tensors (data_compat), so accept both.
    loader = event_file_loader.EventFileLoader(sys.argv[1])
    for event in loader.Load():
        if event.HasField("file_version"):
            print("file_version\t%s" % event.file_version)
        if event.HasField("summary"):
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    v = float(value.simple_value)
                elif value.HasField("tensor"):
                    v = float(tensor_util.make_ndarray(value.tensor).item())
                else:
                    continue
                print("scalar\t%d\t%s\t%r\t%r" % (event.step, value.tag, v, event.wall_time))
    return 0


if __name__ == "__main__":
    sys.exit(main())
