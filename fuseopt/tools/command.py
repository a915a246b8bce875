"""The ``fuseopt`` command: tools around a job (the launcher is ``fuseoptrun``).

    fuseopt timeline summarize FILE [--top N]
    fuseopt timeline plot FILE --output timeline.png [--tensors N]
    fuseopt build-tf-kernel
"""
import argparse
import sys

from . import timeline_summary
from .timeline_plot import plot


def build_parser():
    p = argparse.ArgumentParser(prog="fuseopt")
    sub = p.add_subparsers(dest="command", required=True)
    tl = sub.add_parser("timeline", help="read a FUSEOPT_TIMELINE file")
    tl_sub = tl.add_subparsers(dest="action", required=True)
    s = tl_sub.add_parser("summarize", help="per-tensor and per-bucket time and bytes")
    s.add_argument("file")
    s.add_argument("--top", type=int, default=15, help="rows per table (default 15)")
    plot = tl_sub.add_parser("plot", help="draw the timeline as a PNG (needs matplotlib)")
    plot.add_argument("file")
    plot.add_argument("--output", "-o", required=True)
    plot.add_argument("--tensors", type=int, default=12, help="rows to draw (default 12)")
    plot.add_argument("--last-ms", type=float, default=None,
                      help="draw only the trace's last this many milliseconds")
    sub.add_parser("check-build", help="what this install runs on: frameworks, the MPI library "
                   "and ABI loaded, thread level, fabrics, NCCL/HCCL, the kernel cache")
    sub.add_parser("build-tf-kernel", help="build fuseopt's TensorFlow kernel into its cache "
                   "now (a container image, a cluster's shared home) instead of at the first "
                   "traced collective")
    return p


def build_tf_kernel():
    from ..tensorflow import kernels
    try:
        kernels.build_and_load(ahead=True)
    except kernels.KernelUnavailable as e:
        print("fuseopt: %s" % e, file=sys.stderr)
        return 1
    print("fuseopt: %s" % kernels.library_path(kernels.cache_dir()))
    return 0


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.command == "build-tf-kernel":
        return build_tf_kernel()
    if args.command == "check-build":
        from .check_build import render
        from .._version import version
        print(render(version()))
        return 0
    try:
        events = timeline_summary.load(args.file)
    except (OSError, ValueError) as e:
        print("fuseopt: %s" % e, file=sys.stderr)
        return 2
    if args.action == "summarize":
        print(timeline_summary.format_summary(timeline_summary.summarize(events), args.top))
    else:
        plot(events, args.output, args.tensors, args.last_ms)
        print("fuseopt: wrote %s" % args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
