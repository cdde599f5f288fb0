"""`python -m gptviz bench --scan`: what the corpus scan costs, in one run on one machine.

- the local scan of 64 windows x 256 tokens against a plain batched forward pass of the same
  windows in the same batches, wall and CPU time, the best of SPEED_ROUNDS alternating runs each, with
  everything the scan keeps (goal: at most 1.3x);
- the peak memory of scanning 3x the windows against 1x, each in a fresh process (goal: +150 MB);
- threads (--parts threads): the local scan with torch's default threads (one per core, OpenMP
  waiting passively as every gptviz command sets it) against every other count, optionally beside
  --burners busy-looping processes (a laptop whose other core is busy); goal: the default >= 0.9x the best;
- the Ray engine (a Ray started here) against the local engine on 512 windows, tokens/s of both,
  with Ray's own start-up (ray.init) timed apart;
- cluster (--parts cluster): the Ray engine on a "cluster" of two nodes on this machine (two `ray start`
  processes on 127.0.0.1, 1 CPU and a small object store each: gptviz/bench/cluster.py) against the
  local engine on the same 512 windows, the local engine timed before and after (the load moves), with
  the load average; --checkpoint: of that model at its block size (at most 128 tokens a window).

A GPT-2-small-shaped model with random weights (--tiny: a tiny one, to prove the bench runs).
A benchmark prints numbers; it asserts nothing about them.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from ..config import GPTConfig
from ..errors import GptvizError
from ..model import GPT
from .forward import GPT2_SMALL, TINY


def windows(n: int, T: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, T).tolist() for _ in range(n)]


def build(config: dict) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(**config)).eval()


@torch.no_grad()
def plain_seconds(model: GPT, docs: list[list[int]], batch: int) -> float:
    started = time.perf_counter()
    for i in range(0, len(docs), batch):
        model(torch.tensor(docs[i : i + batch]))
    return time.perf_counter() - started


SPEED_ROUNDS = 2  # plain and scan alternate, the best of each is kept: another job's load slows either alike


def clocked(runs: dict, rounds: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and CPU seconds (this process's, all its threads) of each run, `rounds` times, alternating."""
    wall: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            started, used = time.perf_counter(), time.process_time()
            run()
            wall[name].append(time.perf_counter() - started)
            cpu[name].append(time.process_time() - used)
    return wall, cpu


def scan_seconds(model, docs, T: int, batch: int, **kw) -> tuple[float, dict]:
    from ..scanning import scan

    started = time.perf_counter()
    s = scan(model, docs, window=T, k=20, batch_size=batch, **kw)
    return time.perf_counter() - started, s.summary


def peak_child(tiny: bool, n: int, T: int, batch: int) -> int:
    """Peak RSS (bytes) of a fresh process that builds the model and scans n windows."""
    code = (
        "import resource, gptviz.bench.scan as b; "
        f"m = b.build(b.TINY if {tiny} else b.GPT2_SMALL); "
        f"b.scan_seconds(m, b.windows({n}, {T}, m.config.vocab_size), {T}, {batch}); "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return int(done.stdout.split()[-1])


BURN = "while True: pass"


def thread_speeds(model, T: int, batch: int, n: int, burners: int, rounds: int = 3) -> dict:
    """Tokens/s of the local scan of n windows at each thread count (the default first), the best of
    `rounds` interleaved runs each, with `burners` busy-looping processes running meanwhile."""
    default = torch.get_num_threads()
    counts = [default] + [c for c in range(1, (os.cpu_count() or 1) + 1) if c != default]
    docs = windows(n, T, model.config.vocab_size, seed=2)
    procs = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(burners)]
    best: dict[int, float] = {}
    try:
        scan_seconds(model, docs[:batch], T, batch)  # warm-up
        for _ in range(rounds):  # interleaved: a change in the machine's load hits every setting alike
            for c in counts:
                torch.set_num_threads(c)
                seconds, _ = scan_seconds(model, docs, T, batch)
                best[c] = max(best.get(c, 0.0), n * T / seconds)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        torch.set_num_threads(default)
    top = max(best.values())
    return {
        "threads_default": default,
        "burners": burners,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        **{f"tokens_per_s_{c}_threads": round(v) for c, v in sorted(best.items())},
        "default_over_best": round(best[default] / top, 3),
    }


def cluster_speeds(model, path: str | None, T: int, batch: int, n: int) -> dict:
    """Tokens/s of the local engine (before and after) and of the Ray engine on two 1-CPU nodes started
    here, on the same n windows of T tokens; the workers load the checkpoint at path (model saved to a
    temporary folder when None). The Ray driver is a process of its own (cluster_driver)."""
    from ..formats import save
    from .cluster import local_cluster

    docs = windows(n, T, model.config.vocab_size, seed=1)
    tokens = n * T
    out: dict = {"cluster_windows": n, "cluster_window_tokens": T, "load_average_start": os.getloadavg()}
    before, _ = scan_seconds(model, docs, T, batch)
    left: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = path or str(save(model, Path(tmp) / "model"))
        with local_cluster(nodes=2, cpus=1, report=left.extend) as (address, env):
            args = json.dumps([address, 2, str(path), n, T, model.config.vocab_size, batch])
            code = f"import gptviz.bench.scan as b, json; b.cluster_driver(*json.loads({args!r}))"
            done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    on = json.loads(done.stdout.splitlines()[-1])
    after, _ = scan_seconds(model, docs, T, batch)
    local = tokens / ((before + after) / 2)
    out.update(
        local_tokens_per_s_before=round(tokens / before),
        local_tokens_per_s_after=round(tokens / after),
        local_threads=torch.get_num_threads(),
        cluster_nodes=2,
        cluster_workers=on["workers"],
        cluster_join_s=round(on["join_s"], 2),
        cluster_scan_s=round(on["scan_s"], 2),
        cluster_tokens_per_s=round(tokens / on["scan_s"]),
        cluster_over_local_throughput=round(tokens / on["scan_s"] / local, 3),
        load_average_end=os.getloadavg(),
        ray_processes_left=len(left),
    )
    return out


def cluster_driver(address: str, nodes: int, path: str, n: int, T: int, vocab: int, batch: int) -> None:
    """The Ray engine's driver for cluster_speeds, in a process started with the cluster's token: join
    (timed apart, with the wait for every node), then scan the same windows; prints JSON."""
    import ray

    from .cluster import wait_for_nodes

    started = time.perf_counter()
    ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    try:
        wait_for_nodes(nodes)
        joined = time.perf_counter() - started
        seconds, summary = scan_seconds(path, windows(n, T, vocab, seed=1), T, batch, engine="ray")
    finally:
        ray.shutdown()
    print(json.dumps({"join_s": joined, "scan_s": seconds, "workers": summary["ray_workers"]}))


def report(out: dict, **values) -> None:
    """Record figures and print them at once: a long run on a busy machine keeps what it measured."""
    out.update(values)
    for key, value in values.items():
        print(f"{key:<28}  {value}", flush=True)


def run(
    tiny: bool,
    threads: int | None,
    parts: set[str],
    ray_windows: int,
    mem_windows: int = 64,
    burners: int = 0,
    checkpoint: str | None = None,
) -> dict:
    config = TINY if tiny else GPT2_SMALL
    T = 32 if tiny else 256
    batch = 8
    if threads:
        torch.set_num_threads(threads)
    model = build(config)
    out: dict = {}
    report(
        out,
        model="tiny" if tiny else "GPT-2 small shape (random weights)",
        machine=f"{platform.machine()}, {os.cpu_count()} cores (shared), torch threads {torch.get_num_threads()}",
        window_tokens=T,
        batch_windows=batch,
    )
    if "speed" in parts:
        docs = windows(64, T, config["vocab_size"])
        plain_seconds(model, docs[:batch], batch)  # warm-up: first-call allocations are no one's cost
        runs = {"plain": lambda: plain_seconds(model, docs, batch), "scan": lambda: scan_seconds(model, docs, T, batch)}
        wall, cpu = clocked(runs, SPEED_ROUNDS)
        report(
            out,
            windows=64,
            plain_s=round(min(wall["plain"]), 2),
            scan_s=round(min(wall["scan"]), 2),
            scan_over_plain=round(min(wall["scan"]) / min(wall["plain"]), 3),
            plain_cpu_s=round(min(cpu["plain"]), 2),
            scan_cpu_s=round(min(cpu["scan"]), 2),
            scan_over_plain_cpu=round(min(cpu["scan"]) / min(cpu["plain"]), 3),
            speed_load_average=[round(x, 2) for x in os.getloadavg()],
        )
    if "memory" in parts:
        one, three = peak_child(tiny, mem_windows, T, batch), peak_child(tiny, 3 * mem_windows, T, batch)
        report(out, mem_windows=mem_windows, peak_rss_1x_mb=round(one / 2**20), peak_rss_3x_mb=round(three / 2**20))
        report(out, peak_growth_3x_mb=round((three - one) / 2**20))
    if "threads" in parts:
        if checkpoint:  # a real model (the shipped one: what a laptop scans), at its own block size
            from ..formats import load

            real = load(checkpoint).model.eval()
            Tr = min(128, real.config.block_size)
            report(out, threads_model=checkpoint, **thread_speeds(real, Tr, 2048 // Tr, 64, burners))
        else:
            report(out, **thread_speeds(model, T, batch, 16, burners))
    if "ray" in parts:
        many = windows(ray_windows, T, config["vocab_size"], seed=1)
        tokens = len(many) * T
        local_many, _ = scan_seconds(model, many, T, batch)
        report(
            out, ray_windows=len(many), local_scan_s=round(local_many, 2), local_tokens_per_s=round(tokens / local_many)
        )
        import ray

        from ..formats import save

        with tempfile.TemporaryDirectory() as tmp:
            path = save(model, Path(tmp) / "model")  # each Ray worker loads it from the path
            started = time.perf_counter()
            ray.init(
                num_cpus=os.cpu_count(), object_store_memory=256 * 2**20, include_dashboard=False, log_to_driver=False
            )
            ray_start = time.perf_counter() - started
            try:
                on_ray, _ = scan_seconds(str(path), many, T, batch, engine="ray")
            finally:
                ray.shutdown()
        report(
            out,
            ray_init_s=round(ray_start, 2),
            ray_scan_s=round(on_ray, 2),
            ray_tokens_per_s=round(tokens / on_ray),
            ray_over_local_throughput=round(local_many / on_ray, 3),
        )
    if "cluster" in parts:
        if checkpoint:
            from ..formats import load

            real = load(checkpoint).model.eval()
            report(
                out,
                cluster_model=checkpoint,
                **cluster_speeds(real, str(checkpoint), min(128, real.config.block_size), 16, ray_windows),
            )
        else:
            report(out, **cluster_speeds(model, None, T, batch, ray_windows))
    report(out, maxrss_this_process_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
    return out


PARTS = ("speed", "memory", "ray", "threads", "cluster")


def main(args) -> None:
    parts = set((args.parts or "speed,memory,ray").split(","))
    unknown = sorted(parts - set(PARTS))
    if unknown:
        raise GptvizError(f"unknown --parts {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    result = run(args.tiny, args.threads, parts, args.ray_windows, args.mem_windows, args.burners, args.checkpoint)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
