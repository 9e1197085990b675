"""Allocator-level references for transformers' eager generation with a static or a dynamic KV cache.

Runs a real transformers model (the shared tracer's families, ``shared/calibration/tracer/models.py``) on fake CUDA
tensors (exact ``torch.cuda.max_memory_allocated()``, the CUDA attention kernel chosen as PyTorch chooses it) in
``generate``'s greedy loop (``_sample``): the prefill with ``logits_to_keep=1``, then ``--new`` - 1 decode steps,
each feeding the previous token with the 2-D attention mask grown by one column, copying the last position's logits
to fp32 (``.to(copy=True, dtype=torch.float32)``) and appending the argmax to ``input_ids``; run twice, the second
reported. ``--cache static`` sets the cache up as ``generate(..., cache_implementation="static")`` does:
``StaticCache(max_cache_len=max_length - 1)``, or ``--max-cache-len`` when larger (``generation_config.max_cache_len``),
allocated by each layer's first update in the prefill;
``--cache dynamic`` (the default cache) grows by ``torch.cat``.

The masks' skip check (``masking_utils._ignore_causal_mask_sdpa``) reads the padding mask's values and the cache's
position, which fake tensors do not have: it is answered from the shapes, as the real values of an all-ones 2-D mask
that ``prepare_padding_mask`` pads with zeros to the cache's length give it (:func:`_answer_mask_skip_from_shapes`).
So the decode steps of a static cache get a boolean mask until the cache is full, and the dynamic cache's steps get
none, as on a GPU with an unpadded batch.

    /tmp/tracer-venv/bin/python benchmarks/tracer_generate_eager.py --arch llama --layers 3 --hidden 512 \
        --heads 8 --kv-heads 2 --ffn 1376 --vocab 2000 --batch 1 --seq 64 --new 1024 --dtype bf16 --cache static

``--cases`` traces the cases below and prints ``benchmarks/data/tracer_generate_eager.json``; ``--top`` lists the
largest tensors alive at the peak; ``--score`` (with the project's environment) prints vramcalc's estimate of each
stored case and its error.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TRACER = Path(__file__).resolve().parent.parent.parent / "shared" / "calibration" / "tracer"
TOP = "--top" in sys.argv

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tracer_compile import _GPT2, _LLAMA, _LLAMA_GQA  # noqa: E402  # the compiled generation's small models

_STATIC = "--cache static"

#: The stored cases (``benchmarks/data/tracer_generate_eager.json``): ``--seq`` is the prompt.
CASES: dict[str, str] = {
    "gen-static-llama_gqa_b1_p64_n1024_bf16": f"{_LLAMA_GQA} --batch 1 --seq 64 --new 1024 --dtype bf16 {_STATIC}",
    "gen-static-llama_gqa_b4_p512_n64_bf16": f"{_LLAMA_GQA} --batch 4 --seq 512 --new 64 --dtype bf16 {_STATIC}",
    "gen-static-llama_gqa_b2_p1024_n512_fp16": f"{_LLAMA_GQA} --batch 2 --seq 1024 --new 512 --dtype fp16 {_STATIC}",
    "gen-static-llama_b2_p256_n256_bf16": f"{_LLAMA} --batch 2 --seq 256 --new 256 --dtype bf16 {_STATIC}",
    "gen-static-gpt2_b2_p256_n128_fp32": f"{_GPT2} --batch 2 --seq 256 --new 128 --dtype fp32 {_STATIC}",
    "gen-static-llama_gqa_b2_p16_n8_c4096_bf16": (
        f"{_LLAMA_GQA} --batch 2 --seq 16 --new 8 --dtype bf16 {_STATIC} --max-cache-len 4096"
    ),
    "gen-static-gpt2_b1_p16_n8_c2048_bf16": (
        f"{_GPT2} --batch 1 --seq 16 --new 8 --dtype bf16 {_STATIC} --max-cache-len 2048"
    ),
    "gen-dynamic-llama_gqa_b1_p64_n1024_bf16": f"{_LLAMA_GQA} --batch 1 --seq 64 --new 1024 --dtype bf16",
    "gen-dynamic-llama_gqa_b4_p512_n64_bf16": f"{_LLAMA_GQA} --batch 4 --seq 512 --new 64 --dtype bf16",
    "gen-dynamic-llama_gqa_b2_p1024_n512_fp16": f"{_LLAMA_GQA} --batch 2 --seq 1024 --new 512 --dtype fp16",
}


def _answer_mask_skip_from_shapes(filled: list[int]) -> None:
    """``masking_utils._ignore_causal_mask_sdpa`` answered as the real values give it: the 2-D mask is all ones on its
    ``filled[0]`` columns, and ``prepare_padding_mask`` pads it with zeros to the cache's length; the query starts
    after what the cache holds (``filled[0]`` less the query's length). Its checks, in its order: a local window the
    keys reach; one query or as many keys as queries with no padded column; an empty cache whose padded columns are
    all future ones."""
    import transformers.masking_utils as masking_utils

    def ignore(
        padding_mask: Any,
        q_length: int,
        kv_length: int,
        q_offset: Any,
        kv_offset: int,
        local_attention_size: int | None = None,
    ) -> bool:
        if local_attention_size is not None and kv_length >= local_attention_size:
            return False
        unpadded = padding_mask is None or kv_offset + kv_length <= filled[0]
        if (q_length == 1 or kv_length == q_length) and unpadded:
            return True
        return filled[0] == q_length  # an empty cache: the ones are the query's, every padded column a future one

    masking_utils._ignore_causal_mask_sdpa = ignore


def trace(argv: list[str]) -> dict[str, Any]:
    """The traced peak of transformers' eager greedy generation (see the module's notes)."""
    from tracer_llm import _take

    argv, new = _take(argv, "--new", True)
    argv, cache_kind = _take(argv, "--cache", True)
    argv, longest = _take(argv, "--max-cache-len", True)
    argv = [a for a in argv if a != "--top"]
    n_new = int(new or 8)
    static = (cache_kind or "dynamic") == "static"
    sys.path.insert(0, str(TRACER))
    import fakecuda  # type: ignore[import-not-found]

    fakecuda.enable()
    import torch
    import traced_cases
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import DynamicCache, StaticCache

    filled = [0]
    _answer_mask_skip_from_shapes(filled)
    a, dtype = traced_cases.inference_args(argv)
    with FakeTensorMode(allow_non_fake_inputs=False):
        model, desc = traced_cases.frozen_model(a, dtype, a.seq + n_new)
        with torch.device("cuda"):
            prompt = torch.randint(0, model.config.vocab_size, (a.batch, a.seq))
            prompt_mask = torch.ones(a.batch, a.seq, dtype=torch.int64)
        tracker = traced_cases.card_tracker(a.gpu, model, prompt, prompt_mask)
        text = model.config.get_text_config(decoder=True)

        def generate() -> Any:
            tokens = max(a.seq + n_new - 1, int(longest or 0))
            cache = StaticCache(config=text, max_cache_len=tokens) if static else DynamicCache(config=text)
            input_ids, next_input, mask = prompt, prompt, prompt_mask
            for _ in range(n_new):
                filled[0] = mask.shape[-1]
                outputs = model(
                    input_ids=next_input, attention_mask=mask, cache=cache, use_cache=True, logits_to_keep=1
                )
                next_logits = outputs.logits[:, -1, :].to(copy=True, dtype=torch.float32)
                del outputs
                next_tokens = torch.argmax(next_logits, dim=-1)
                input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
                mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
                next_input = next_tokens[:, None]
            return input_ids

        return traced_cases.second_run(tracker, generate, desc, TOP)


def traced_spec(command: str) -> Any:
    """The vramcalc spec of a stored case: :func:`tracer_compile.traced_spec`'s, run eagerly, with the dynamic cache
    where the case ran it."""
    from tracer_compile import traced_spec as compiled_spec

    words = command.split()
    longest = int(words[words.index("--max-cache-len") + 1]) if "--max-cache-len" in words else None
    spec = compiled_spec(command.replace("--cache static", ""), compile_=False)
    update: dict[str, Any] = {"max_cache_len": longest} if "--cache static" in command else {"cache": None}
    return spec.model_copy(update={"workload": spec.workload.model_copy(update=update)})


def score() -> None:
    """vramcalc's estimate of every stored case against the traced peak, and the quality bar (median |error|
    <= 2 %, largest <= 5 %). Run with the project's environment (no torch needed)."""
    import statistics

    from vramcalc.families import estimate

    data = json.loads((Path(__file__).resolve().parent / "data" / "tracer_generate_eager.json").read_text("utf-8"))
    errors = []
    for case in data["cases"]:
        got = estimate(traced_spec(case["command"])).peak_allocated_bytes
        errors.append(got / case["peak_bytes"] - 1)
        print(f"{case['id']:45s} traced {case['peak_bytes']:>13,}  vramcalc {got:>13,}  {errors[-1]:+.2%}")
    absolute = [abs(e) for e in errors]
    print(f"median |error| {statistics.median(absolute):.2%}, largest {max(absolute):.2%} (bar: 2 %, 5 %)")


def main(argv: list[str]) -> None:
    if argv == ["--score"]:
        score()
        return
    if argv == ["--cases"]:
        import traced_cases  # beside this script

        traced_cases.print_generation_cases("tracer_generate_eager.py", CASES, trace)
        return
    print(json.dumps(trace(argv), indent=2, default=str))


if __name__ == "__main__":
    main(sys.argv[1:])
