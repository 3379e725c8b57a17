"""Draws docs/across_hosts.png: pgas against MPI between the two namespace hosts, before
and after the ucx engine (issue 25), from the figures recorded in docs/benchmarks.md and
docs/collectives.md (each pair measured in one run beside MPI on the same TCP wire).

    python docs/across_hosts_plot.py        # needs matplotlib
"""
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# operation: ((pgas, MPI) before, (pgas, MPI) after), microseconds
FIGURES = {
    "host put+quiet 8 B": ((410, 8.5), (18.16, 21.58)),
    "host get 8 B": ((412, 8.5), (16.81, 21.45)),
    "host put+quiet 4 KiB": ((421, 8.7), (19.63, 22.16)),
    "all-reduce 8 B": ((917, 10), (11.7, 9.6)),
    "all-reduce 2 MiB": ((1470, 300), (1608.4, 1257.4)),
    "device p+quiet": ((1600, 8.5), (44.0, 22.7)),
}


def main() -> None:
    names = list(FIGURES)
    before = [mpi / ours for (ours, mpi), _ in FIGURES.values()]
    after = [mpi / ours for _, (ours, mpi) in FIGURES.values()]
    fig, ax = plt.subplots(figsize=(9, 4))
    places = range(len(names))
    ax.bar([p - 0.2 for p in places], before, 0.4, label="before (every request through Python threads)")
    ax.bar([p + 0.2 for p in places], after, 0.4, label="after (the ucx engine, MPI's collectives)")
    ax.axhline(1.0, color="grey", ls="--")
    ax.set_yscale("log")
    ax.set_xticks(list(places), names, rotation=20, ha="right")
    ax.set_ylabel("MPI time / pgas time (above 1: pgas faster)")
    ax.set_title("2 PEs on the two namespace hosts, MPI on the same TCP wire")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "across_hosts.png")
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
