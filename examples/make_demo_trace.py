#!/usr/bin/env python3
"""Generate examples/trace.csv: one week of workloads for examples/cluster.toml.

Usage: python3 examples/make_demo_trace.py [--seed N] > examples/trace.csv

Python standard library only; the same seed always gives the same file.
The mix, per project of examples/cluster.toml:

* org/llm/pretrain: gangs of 16-64 GPUs on whole nodes, 8-48 h, checkpoint
  every 30 min, high priority, not preemptible;
* org/llm/posttrain: 8-16 GPUs, 2-12 h;
* org/mm/vlm: 8-32 GPUs on whole nodes, 4-24 h, often pinned to B200;
* org/rl/sim: 1-4 GPUs at 30% utilisation, 1-6 h, many of them;
* interactive work (notebooks, debugging) from every research project: 1-8 GPUs, 30 min-4 h,
  submitted in working hours, priority high;
* org/infra/serve: a few multi-day services of 1-8 GPUs.

Total demand is about twice the cluster's 208 GPUs x 168 h, and most work is
labelled "high" (inflated priorities). A summary goes to stderr.
"""

import argparse
import csv
import random
import sys

HOUR = 3600
DAY = 24 * HOUR
HORIZON = 7 * DAY
CLUSTER_GPUS = 16 * 8 + 8 * 8 + 2 * 8

COLUMNS = ["id", "submit_s", "account", "user", "class", "gpus", "nodes", "gpu_type",
           "work_s", "checkpoint_s", "util", "priority", "preemptible"]

USERS = {
    "org/llm/pretrain": ["ana", "ben", "chen"],
    "org/llm/posttrain": ["dara", "eli", "fay", "gus"],
    "org/mm/vlm": ["hana", "ivan", "jo"],
    "org/rl/sim": ["kai", "lena", "mo", "nia"],
    "org/infra/serve": ["omar", "pia"],
}


def working_hours(rng):
    """A submit time on a weekday between 09:00 and 18:00 (day 0 is a Monday)."""
    day = rng.randrange(5)
    return day * DAY + rng.randrange(9 * HOUR, 18 * HOUR)


def daytime_biased(rng):
    """Mostly during the day (08:00-20:00), sometimes at any time."""
    if rng.random() < 0.7:
        return rng.randrange(7) * DAY + rng.randrange(8 * HOUR, 20 * HOUR)
    return rng.randrange(HORIZON)


def row(wid, submit, account, user, cls, gpus, nodes, gpu_type, work_s, checkpoint_s, util, priority,
        preemptible):
    return {
        "id": wid, "submit_s": submit, "account": account, "user": user, "class": cls, "gpus": gpus,
        "nodes": nodes, "gpu_type": gpu_type, "work_s": work_s, "checkpoint_s": checkpoint_s,
        "util": f"{util:.2f}", "priority": priority, "preemptible": "true" if preemptible else "false",
    }


def pretrain(rng, n):
    acct = "org/llm/pretrain"
    for i in range(n):
        gpus = rng.choice([16, 32, 32, 48, 64])
        yield row(f"pretrain-{i:04d}", rng.randrange(HORIZON - DAY), acct, rng.choice(USERS[acct]), "batch",
                  gpus, gpus // 8, "H100" if rng.random() < 0.3 else "", rng.randrange(8, 49) * HOUR, 1800,
                  rng.uniform(0.85, 0.95), "high", False)


def posttrain(rng, n):
    acct = "org/llm/posttrain"
    for i in range(n):
        gpus = rng.choice([8, 8, 16])
        yield row(f"posttrain-{i:04d}", daytime_biased(rng), acct, rng.choice(USERS[acct]), "batch", gpus,
                  gpus // 8, "", rng.randrange(2 * 60, 12 * 60 + 1, 15) * 60, rng.choice([900, 1800]),
                  rng.uniform(0.7, 0.9), "high" if rng.random() < 0.8 else "normal", rng.random() < 0.1)


def vlm(rng, n):
    acct = "org/mm/vlm"
    for i in range(n):
        gpus = rng.choice([8, 16, 16, 24, 32])
        yield row(f"vlm-{i:04d}", daytime_biased(rng), acct, rng.choice(USERS[acct]), "batch", gpus, gpus // 8,
                  "B200" if rng.random() < 0.5 else "", rng.randrange(4, 25) * HOUR, 1800,
                  rng.uniform(0.75, 0.9), "high" if rng.random() < 0.85 else "normal", False)


def rl_sim(rng, n):
    acct = "org/rl/sim"
    for i in range(n):
        yield row(f"sim-{i:04d}", daytime_biased(rng), acct, rng.choice(USERS[acct]), "batch",
                  rng.choice([1, 2, 2, 4, 4]), 0, "", rng.randrange(60, 6 * 60 + 1, 10) * 60, 600,
                  rng.uniform(0.25, 0.35), "high" if rng.random() < 0.6 else "normal", rng.random() < 0.5)


def interactive(rng, n):
    projects = ["org/llm/pretrain", "org/llm/posttrain", "org/mm/vlm", "org/rl/sim"]
    for i in range(n):
        acct = rng.choice(projects)
        submit = working_hours(rng) if rng.random() < 0.9 else rng.randrange(HORIZON)
        yield row(f"int-{i:04d}", submit, acct, rng.choice(USERS[acct]), "interactive", rng.choice([1, 1, 2, 4, 8]),
                  0, "", rng.randrange(30, 4 * 60 + 1, 10) * 60, 0, rng.uniform(0.1, 0.5), "high", False)


def services(rng, n):
    acct = "org/infra/serve"
    for i in range(n):
        yield row(f"serve-{i:04d}", rng.randrange(HORIZON - 2 * DAY), acct, rng.choice(USERS[acct]), "service",
                  rng.choice([1, 2, 4, 8]), 0, "", rng.randrange(2 * DAY, 6 * DAY + 1, HOUR), 0,
                  rng.uniform(0.4, 0.7), "high" if rng.random() < 0.7 else "urgent", False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=20240601)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    rows = [
        *pretrain(rng, 28), *posttrain(rng, 170), *vlm(rng, 45), *rl_sim(rng, 700),
        *interactive(rng, 560), *services(rng, 10),
    ]
    rows.sort(key=lambda r: (r["submit_s"], r["id"]))
    out = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n")
    out.writeheader()
    out.writerows(rows)

    demand = sum(r["gpus"] * r["work_s"] for r in rows) / HOUR
    capacity = CLUSTER_GPUS * HORIZON / HOUR
    print(f"{len(rows)} workloads, demand {demand:,.0f} GPU-h = {demand / capacity:.2f} x capacity "
          f"({capacity:,.0f} GPU-h)", file=sys.stderr)


if __name__ == "__main__":
    main()
