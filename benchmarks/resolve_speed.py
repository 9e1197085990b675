"""How fast a sharded Hub model resolves: from the local Hugging Face cache, and over the network by range
requests, several at a time against one at a time.

    python benchmarks/resolve_speed.py [--shards 30] [--latency-ms 20] [--runs 5]

Builds a repository of ``--shards`` real safetensors shards (small tensors, written by
``safetensors.numpy.save_file``) with ``config.json`` and ``model.safetensors.index.json``, serves it from
the tests' local Hub stand-in (tests/hubserver.py, on 127.0.0.1: no network is used), and times, as the
median of ``--runs`` runs, each in fresh caches:

* ``cache, weights``: :func:`vramcalc.sources.hub.cached_checkpoint` on a snapshot that
  ``snapshot_download`` put in the Hugging Face cache (every shard's header read from disk); the goal is
  under 1 s;
* ``cli, from cache``: ``vramcalc import`` of the model in a fresh interpreter, offline
  (``HF_HUB_OFFLINE=1``), from that snapshot: start-up, imports and the resolve, as a user runs it;
* ``cache, headers``: the same as ``cache, weights`` when the Hugging Face cache holds only the configs
  and vramcalc's own cache the headers read before (what a second look after a network read finds);
* ``hub, parallel`` and ``hub, sequential``: :func:`vramcalc.sources.hub.fetch_checkpoint` with up to
  ``MAX_PARALLEL`` range requests in flight, and with one. The stand-in answers every request after
  ``--latency-ms`` (a round trip to the Hub and its CDN is some 10 to 100 ms), which is what parallel
  requests hide; on a bare loopback the two differ little.

* ``start-up``: ``vramcalc estimate --model REPO --gpu h100-sxm`` offline from that snapshot against
  ``vramcalc estimate SPEC --gpu h100-sxm`` on the spec ``vramcalc import`` wrote for it, in paired,
  interleaved fresh interpreters (``--startup-runs`` pairs): the median CPU time of each (user + system
  of the child) and the median of the per-pair ratios. The goal is a ratio within 1.10: naming a cached
  model costs what a spec file does.

Also prints the requests each network resolve made. Imports huggingface_hub, safetensors and numpy (the
``test`` extra). Always exits 0: it is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import hub_repos  # noqa: E402
from hubserver import HubServer  # noqa: E402

from vramcalc.sources import hub as hub_module  # noqa: E402

REPO = "bench/sharded"
#: A complete decoder config, so ``vramcalc import`` estimates the model (its layers are not the shards').
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 2048,
    "torch_dtype": "bfloat16",
}


def _fresh_caches(base: Path, run: str) -> None:
    os.environ["HF_HOME"] = str(base / run / "hf")
    os.environ["HF_HUB_CACHE"] = str(base / run / "hf" / "hub")
    os.environ["VRAMCALC_CACHE"] = str(base / run / "vramcalc")


def _time(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _cpu(command: list[str], env: dict[str, str]) -> float:
    """CPU seconds (user + system) of one run of ``command`` in a fresh interpreter."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, env=env, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr.decode()}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def startup_pairs(spec: Path, env: dict[str, str], runs: int) -> tuple[float, float, float]:
    """Median CPU of ``estimate --model REPO`` and of ``estimate SPEC``, and the median per-pair ratio."""
    by_model = [sys.executable, "-m", "vramcalc", "estimate", "--model", REPO, "--gpu", "h100-sxm"]
    by_model += ["--mode", "inference", "--seq-len", "2048"]
    by_spec = [sys.executable, "-m", "vramcalc", "estimate", str(spec), "--gpu", "h100-sxm"]
    for command in (by_model, by_spec):  # warm-up: bytecode caches written
        _cpu(command, env)
    model_cpu, spec_cpu = [], []
    for _ in range(runs):
        model_cpu.append(_cpu(by_model, env))
        spec_cpu.append(_cpu(by_spec, env))
    ratios = [m / s for m, s in zip(model_cpu, spec_cpu, strict=True)]
    return statistics.median(model_cpu), statistics.median(spec_cpu), statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=30)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--startup-runs", type=int, default=11)
    args = parser.parse_args()

    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ["HF_TOKEN"] = "hf_benchmark"
    os.environ.pop("HF_HUB_OFFLINE", None)
    base = Path(tempfile.mkdtemp(prefix="vramcalc-resolve-"))
    expected = hub_repos.sharded_repo(base / "repo", shards=args.shards, width=64)
    hub_repos.write_json(base / "repo" / "config.json", {**CONFIG, "num_hidden_layers": args.shards})
    server = HubServer().start()
    os.environ["HF_ENDPOINT"] = server.url
    server.add_repo(REPO, base / "repo")
    from huggingface_hub import snapshot_download

    times: dict[str, list[float]] = {
        "cache, weights": [],
        "cli, from cache": [],
        "cache, headers": [],
        "hub, parallel": [],
        "hub, sequential": [],
    }
    requests: dict[str, int] = {}
    parallel = hub_module.MAX_PARALLEL
    try:
        for run in range(args.runs):
            # The Hugging Face cache holding the whole repository, as `hf download` leaves it.
            _fresh_caches(base, f"full{run}")
            server.delay = 0.0
            snapshot_download(REPO, cache_dir=os.environ["HF_HUB_CACHE"], endpoint=server.url)
            checkpoint = hub_module.cached_checkpoint(REPO, None)
            assert checkpoint is not None and checkpoint.weight_bytes == expected
            times["cache, weights"].append(_time(lambda: hub_module.cached_checkpoint(REPO, None)))
            command = [sys.executable, "-m", "vramcalc", "import", REPO]
            env = {**os.environ, "HF_HUB_OFFLINE": "1"}
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"vramcalc import {REPO} failed: {done.stderr or done.stdout}")
            times["cli, from cache"].append(_time(lambda: subprocess.run(command, env=env, capture_output=True)))
            if run == 0:
                spec = base / "imported.yaml"
                spec.write_text(done.stdout, encoding="utf-8")
                startup = startup_pairs(spec, env, args.startup_runs)

            server.delay = args.latency_ms / 1000
            for label, workers in (("hub, parallel", parallel), ("hub, sequential", 1)):
                _fresh_caches(base, f"{label}{run}")
                hub_module.MAX_PARALLEL = workers
                server.clear()
                elapsed = _time(lambda: hub_module.fetch_checkpoint(REPO, None, "bench"))
                times[label].append(elapsed)
                requests[label] = len(server.requests)
            hub_module.MAX_PARALLEL = parallel

            # The configs in the Hugging Face cache, the headers in vramcalc's (after the runs above).
            server.clear()
            found = hub_module.cached_checkpoint(REPO, None)
            assert found is not None and found.weight_bytes == expected and not server.requests
            times["cache, headers"].append(_time(lambda: hub_module.cached_checkpoint(REPO, None)))
    finally:
        hub_module.MAX_PARALLEL = parallel
        server.stop()

    print(f"{args.shards} shards ({expected:,} bytes of tensors), {args.latency_ms:g} ms per request, {args.runs} runs")
    for label, values in times.items():
        extra = f"  ({requests[label]} requests)" if label in requests else ""
        print(
            f"  {label:<16} median {statistics.median(values) * 1000:8.1f} ms  min {min(values) * 1000:8.1f} ms{extra}"
        )
    model_cpu, spec_cpu, ratio = startup
    print(
        f"  start-up (CPU, {args.startup_runs} pairs): --model from the cache {model_cpu * 1000:.0f} ms, "
        f"the imported spec {spec_cpu * 1000:.0f} ms, ratio {ratio:.3f}"
    )
    speedup = statistics.median(times["hub, sequential"]) / statistics.median(times["hub, parallel"])
    print(f"  parallel range requests ({parallel} in flight): {speedup:.1f}x faster than one at a time")


if __name__ == "__main__":
    main()
