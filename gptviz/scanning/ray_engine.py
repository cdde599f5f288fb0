"""The Ray engine: the same batches as the local engine, run on Ray Data.

A dataset holds one row per batch (the same groups local.batches() makes, so both engines pad and
reduce identically); `map_batches` runs a callable class over an actor pool, so each worker loads
the model once (from the checkpoint path, or from weights put in the object store) and returns
the Partial of the batches it was given, merged there, as a plain .npz. The driver merges those as
they stream in (the top-k merge is exact in any order): a few per worker, not one per batch. The
cluster is the one `ray_address=` or $RAY_ADDRESS names; else a Ray is started on this machine with
bounded CPUs and object-store memory, and shut down after.

Only this module imports ray, and only when the Ray engine is asked for.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path

import numpy as np

from ..errors import GptvizError
from .corpus import Window
from .local import batches
from .reduce import Accumulator, Partial

CALLS_PER_ACTOR = 4  # a worker merges its batches into this many partials (more: finer progress)
LOCAL_MAX_CPUS = 8  # a Ray started here takes at most this many cores ...
LOCAL_OBJECT_STORE = 256 * 2**20  # ... and this much shared memory for batches and partials (more for
# a model handed over in memory, whose weights go through the object store)


DEFAULT_TIMEOUT = 30.0  # seconds to wait for a cluster that does not answer
TIMEOUT_ENV = "GPTVIZ_RAY_TIMEOUT"


class RayEngineError(GptvizError, RuntimeError):
    """Ray is missing, or the cluster cannot be reached."""


class ModelWorker:
    """An actor of the pool: loads the model once. It runs with `threads` torch threads, and OpenMP
    waits as the driver's does (worker_env: set as the worker process starts, before torch loads
    OpenMP, which reads it once)."""

    def __init__(self, source, device: str, threads: int):
        import torch

        torch.set_num_threads(threads)
        self.threads = torch.get_num_threads()
        if isinstance(source, str):  # a checkpoint path, loaded where the worker runs
            from ..formats import load

            self.model = load(source, device=device).model
        else:  # weights from the object store: {"config": dict, "state": {name: ndarray}}
            import ray

            from ..config import GPTConfig
            from ..model import GPT

            if isinstance(source, ray.ObjectRef):
                source = ray.get(source)
            self.model = GPT(GPTConfig.from_dict(source["config"]))
            self.model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in source["state"].items()})
            self.model = self.model.to(device).eval()


class ScanWorker(ModelWorker):
    """Reduces the batches it is given into Partials."""

    def __call__(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Several batches, merged here into one Partial: the driver merges one per call, not one per
        batch (its top-k merge of a GPT-2-sized model's neurons costs about as much as a batch)."""
        from .reduce import run_batch

        acc = Accumulator(int(rows["k"][0]))
        for windows, ids, lengths in zip(rows["windows"], rows["ids"], rows["lengths"]):
            batch = np.split(np.asarray(ids, dtype=np.int64), np.cumsum(lengths)[:-1])
            acc.add(run_batch(self.model, list(windows), batch, acc.k))
        n = sum(len(w) for w in rows["windows"])
        return {
            "part": np.array([acc.result().to_bytes()], dtype=object),
            "n": np.array([n]),
            # what this worker ran with, as it sees it: the scan's summary records it
            "threads": np.array([self.threads]),
            "wait": np.array([os.environ.get("OMP_WAIT_POLICY", "")], dtype=object),
        }


def worker_env(threads: int) -> dict[str, str]:
    """The environment a worker process starts with: OpenMP waiting as it does here (passive unless the
    user chose otherwise: gptviz/threads.py) and as many OpenMP threads as torch's."""
    return {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"), "OMP_NUM_THREADS": str(threads)}


def plan(node_cpus: Sequence[float], threads: int | None) -> tuple[int, int, int]:
    """(threads per worker, CPUs each reserves, workers) on nodes of these CPU counts. An actor's CPUs
    must fit on one node (reserving more than any node has leaves it waiting for good), so it reserves
    at most the largest node's; by default 2 threads, or fewer where a node has fewer cores."""
    per_node = max([int(c) for c in node_cpus if c >= 1], default=1)
    threads = threads or max(1, min(per_node, 2))
    reserve = min(threads, per_node)
    return threads, reserve, max(1, sum(int(c) // reserve for c in node_cpus))


def _weights(model) -> dict:
    return {
        "config": model.config.to_dict(),
        "state": {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()},
    }


def connect_timeout(ray_timeout: float | None = None) -> float:
    """Seconds to wait for a cluster: ray_timeout, else $GPTVIZ_RAY_TIMEOUT, else DEFAULT_TIMEOUT."""
    value = ray_timeout if ray_timeout is not None else os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise RayEngineError(f"the Ray connect timeout must be a number of seconds, got {str(value)[:40]!r}") from None
    if not 0 < seconds <= 3600:
        raise RayEngineError(f"the Ray connect timeout must be between 0 and 3,600 seconds, got {seconds:g}")
    return seconds


# what an HTTP/2 client sends first (a gRPC server, as Ray's GCS is, answers with its own SETTINGS)
HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _probe(address: str, timeout: float) -> None:
    """Ask host:port in Python first, where a signal still ends the wait: where nothing listens, or
    nothing answers a gRPC hello within timeout, say so in one line (Ray itself retries for minutes
    inside its C++ client, logging each try). Addresses of other forms (ray://, auto) go to Ray."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as s:
            s.sendall(HTTP2_HELLO)
            s.settimeout(max(0.1, deadline - time.monotonic()))
            s.recv(9)  # any answer will do (TLS, another protocol): Ray says what is wrong with it
    except TimeoutError:
        raise _silent(address, timeout) from None
    except OSError as e:
        refused = isinstance(e, ConnectionRefusedError)
        why = "nothing listens there" if refused else (e.strerror or str(e) or "no answer")
        raise RayEngineError(
            f"cannot reach the Ray cluster at {address}: {why}; check --ray-address (or RAY_ADDRESS) and that "
            "its head runs (`ray start --head`)"
        ) from None


def _silent(address: str, timeout: float) -> RayEngineError:
    return RayEngineError(
        f"the Ray cluster at {address} did not answer within {timeout:g} s (--ray-timeout, or "
        f"{TIMEOUT_ENV}); check the address, and that it is a Ray head's"
    )


def _init_within(timeout: float, address: str, **kwargs) -> None:
    """ray.init(address=...) that gives up after timeout seconds. Ray retries a silent address for
    minutes inside its C++ client, where no Python signal handler runs, and its own SIGTERM handler
    is installed first: so the call runs in a daemon thread (where Ray installs none, and SIGTERM
    keeps its default: the process ends at once) and the caller waits for it at most timeout."""
    import ray

    box: dict[str, BaseException] = {}

    def target() -> None:
        try:
            ray.init(address=address, **kwargs)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread as it is
            box["error"] = e

    thread = threading.Thread(target=target, name="gptviz-ray-connect", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():  # the head answered _probe: Ray's client is the one left waiting
        raise RayEngineError(f"Ray could not join the cluster at {address} within {timeout:g} s{AUTH_HINT}")
    if "error" in box:
        raise box["error"]


AUTH_HINT = (
    "; if the cluster uses token authentication (RAY_AUTH_MODE=token), give gptviz its token: "
    "RAY_AUTH_TOKEN, or the file ~/.ray/auth_token (`ray get-auth-token` on the head prints it)"
)


def _connect(ray_address: str | None, store_bytes: int = LOCAL_OBJECT_STORE, ray_timeout: float | None = None) -> bool:
    """Join the named cluster or start a bounded Ray here; True when this call must shut it down."""
    import ray
    from ray.exceptions import AuthenticationError

    if ray.is_initialized():
        return False
    address = ray_address or os.environ.get("RAY_ADDRESS")
    timeout = connect_timeout(ray_timeout)
    try:
        if address:
            _probe(address, timeout)
            _init_within(timeout, address, log_to_driver=False, logging_level="ERROR")
        else:
            package_root = str(Path(__file__).resolve().parents[2])  # workers import this very gptviz
            path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
            ray.init(
                num_cpus=min(os.cpu_count() or 1, LOCAL_MAX_CPUS),
                object_store_memory=store_bytes,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.ERROR,
                runtime_env={"env_vars": {"PYTHONPATH": path}},
            )
    except RayEngineError:
        raise
    except AuthenticationError as e:
        first = " ".join(str(e.message).split())[:160]
        raise RayEngineError(
            f"the Ray cluster at {address} needs its authentication token ({first}){AUTH_HINT}"
        ) from None
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = f"the Ray cluster at {address}" if address else "a Ray on this machine"
        said = " ".join(str(e).split())[:200]
        hint = AUTH_HINT if address and "auth" not in said.lower() else ""
        raise RayEngineError(f"cannot start or reach {where}: {said}{hint}") from None
    return True


def _import_ray():
    try:
        import ray
        import ray.data
    except ImportError:
        raise RayEngineError("the Ray engine needs Ray: pip install 'gptviz[ray]' (or 'ray[data]')") from None
    return ray


@contextlib.contextmanager
def _pool(
    source, ray_address: str | None, ray_timeout: float | None, device: str | None, threads: int | None
) -> Iterator[tuple[int, dict]]:
    """Ray joined (or started here, and shut down after) for a model `source`: yields (workers, the
    map_batches arguments that run a ModelWorker pool of that size over the cluster's nodes)."""
    ray = _import_ray()
    device = device or ("cpu" if isinstance(source, (str, Path)) else str(source.device))
    # weights handed over in memory go through the object store: room for them and the batches
    weights = 0 if isinstance(source, (str, Path)) else sum(p.numel() * p.element_size() for p in source.parameters())
    store = max(LOCAL_OBJECT_STORE, 2 * weights + LOCAL_OBJECT_STORE // 2)
    started_here = _connect(ray_address, store, ray_timeout)
    try:
        logging.getLogger("ray.data").setLevel(logging.ERROR)  # our progress bar, not Ray Data's chatter
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        nodes = [n["Resources"].get("CPU", 0) for n in ray.nodes() if n.get("Alive")]
        threads, reserve, actors = plan(nodes, threads)
        # a path as this machine names it: workers run in Ray's session folder, where a relative one is not
        model_source = str(Path(source).resolve()) if isinstance(source, (str, Path)) else ray.put(_weights(source))
        yield (
            actors,
            dict(
                compute=ray.data.ActorPoolStrategy(size=actors),
                fn_constructor_kwargs={"source": model_source, "device": device, "threads": threads},
                num_cpus=reserve,
                num_gpus=1 if device.startswith("cuda") else 0,
                batch_format="numpy",
                runtime_env={"env_vars": worker_env(threads)},
            ),
        )
    finally:
        if started_here:
            ray.shutdown()


def run_ray(
    source,
    windows: Sequence[Window],
    k: int,
    batch_size: int,
    progress: Callable[[int], None] | None = None,
    *,
    ray_address: str | None = None,
    ray_timeout: float | None = None,
    device: str | None = None,
    threads: int | None = None,
) -> tuple[Accumulator, dict]:
    """source: a checkpoint path (each worker loads it) or a GPT (its weights go to the object store).
    ray_timeout: seconds to wait for the cluster (connect_timeout). threads: torch threads per worker
    (default: plan's). Returns the merged partials and what the workers ran with (workers, threads,
    omp_wait_policy), as they reported it."""
    with _pool(source, ray_address, ray_timeout, device, threads) as (actors, pool):
        import ray.data

        rows = [
            {
                "windows": np.array([w.window for w in group], dtype=np.int64),
                "ids": np.concatenate([w.ids for w in group]),
                "lengths": np.array([len(w.ids) for w in group], dtype=np.int64),
                "k": k,
            }
            for group in batches(windows, batch_size)
        ]
        # batches per worker call: the driver merges at most CALLS_PER_ACTOR partials of each actor
        group = -(-len(rows) // (actors * CALLS_PER_ACTOR))
        parts = ray.data.from_items(rows, override_num_blocks=-(-len(rows) // group)).map_batches(
            ScanWorker, batch_size=group, **pool
        )
        acc = Accumulator(k)
        ran: dict[str, set] = {"threads": set(), "omp_wait_policy": set()}
        for row in parts.iter_rows():
            acc.add(Partial.from_bytes(row["part"]))
            ran["threads"].add(int(row["threads"]))
            ran["omp_wait_policy"].add(str(row["wait"]))
            if progress is not None:
                progress(int(row["n"]))
        return acc, {"workers": actors, **{key: sorted(v) for key, v in ran.items()}}


class SiteWorker(ModelWorker):
    """The site's activations of each group of windows it is given (features.activations.site_rows,
    as the local trainer computes them), as float32 bytes: one row in, one row out."""

    def __call__(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from ..features.activations import site_rows

        out = []
        for site, ids, lengths in zip(rows["site"], rows["ids"], rows["lengths"]):
            windows = np.split(np.asarray(ids, dtype=np.int64), np.cumsum(lengths)[:-1])
            out.append(site_rows(self.model, str(site), windows).cpu().numpy().tobytes())
        return {"x": np.array(out, dtype=object)}


def site_activations(
    source,
    site: str,
    d_in: int,
    groups: Sequence[Sequence[np.ndarray]],
    *,
    ray_address: str | None = None,
    ray_timeout: float | None = None,
    device: str | None = None,
    threads: int | None = None,
) -> Generator[np.ndarray, None, None]:
    """[N, d_in] float32 activations at `site` of each group of windows (token-id arrays), computed
    on Ray workers and yielded in the groups' order as Ray Data streams them (a bounded number in
    flight, never all at once). Ray is left (or shut down, when started here) when it ends or is closed."""
    with _pool(source, ray_address, ray_timeout, device, threads) as (_, pool):
        import ray.data

        rows = [{"site": site, "ids": np.concatenate(g), "lengths": np.array([len(w) for w in g])} for g in groups]
        ds = ray.data.from_items(rows, override_num_blocks=len(rows))
        # the trainer's order is the local engine's: same groups in, same minibatches out
        ds.context.execution_options.preserve_order = True
        out = iter(ds.map_batches(SiteWorker, batch_size=1, **pool).iter_rows())
        try:
            for row in out:
                yield np.frombuffer(row["x"], dtype=np.float32).reshape(-1, d_in)
        except GeneratorExit:
            # closed before the end (an error, a cancel): the rest is read and dropped. Left unread, Ray
            # Data's iterator threads may still call Ray after it is shut down, which ends this process
            # ("The core worker has already been shutdown"; Ray 2.60, seen with a dataset still starting)
            for _ in out:
                pass
            raise
