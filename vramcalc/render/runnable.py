"""What one model can run on one card (:mod:`vramcalc.planning.runnable`): one compact row per way of running
it, then what the rows assume; its ``--json`` document is :class:`vramcalc.results.runnable.RunnableResult`."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from vramcalc.planning.runnable import ADAPTER_RANK, Option, Runnable
from vramcalc.render.escape import terminal_line
from vramcalc.render.plan import layout_text
from vramcalc.render.text import gib, print_wrapped


def answer(option: Option) -> str:
    """The row's answer in words: sequences and longest context, or batch and longest sequence, or plan."""
    if option.refused is not None:
        return f"not modelled: {option.refused}"
    spec = option.spec
    assert spec is not None and spec.workload.seq_len is not None  # a row that is not refused
    at = f"{spec.workload.seq_len:,}"
    if option.sequences is not None:
        return f"{option.sequences:,} x {at} tokens at once; longest {option.longest or 0:,}"
    batch = option.batch.value if option.batch is not None else 0
    if batch or option.name != "full":
        return f"batch {batch:,} x {at} tokens; longest {option.longest or 0:,} at batch 1"
    if option.plan is None:
        return "does not fit, nor any plan of up to 64 of these GPUs"
    return f"does not fit; {option.plan.gpus} GPUs: {layout_text(option.plan)}"


def render_runnable(found: Runnable, console: Console) -> None:
    """The rows, then one line each on what they assume."""
    b = found.budget
    title = terminal_line(f"{found.name} on {b.gpu_name}: {gib(b.available_bytes)} GiB available")
    print_wrapped(console, title)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("row", no_wrap=True)
    table.add_column("fits", no_wrap=True)
    table.add_column("GiB", justify="right", no_wrap=True)
    table.add_column("what fits")
    for option in found.options:
        needed = gib(option.verdict.needed_bytes) if option.verdict is not None else ""
        fits = "yes" if option.fits else "no"
        table.add_row(option.name, fits, needed, answer(option))
    console.print(table)
    notes = [
        "fits, GiB: batch 1 of the row's spec, what the card must hold (serving: what vLLM needs, against "
        "what it manages); longest: the longest sequence (prompt + output for serving) at batch 1, up to the "
        "model's position table",
        f"serve-*: {'vLLM' if found.runtime == 'vllm' else 'runtime ' + found.runtime}, prompt and output halves "
        "of the context; AWQ: 4-bit weights with fp16 activations",
        f"lora, qlora: rank {ADAPTER_RANK} on every linear, bf16 base (qlora: nf4, PEFT's "
        "prepare_model_for_kbit_training), full checkpointing; full: AdamW, mixed-bf16, full checkpointing; "
        "when one card cannot hold it, the fewest GPUs of `vramcalc plan`",
        "--emit-spec ROW writes a row's spec; `vramcalc max-batch` or `plan` on it gives the row's figures",
    ]
    for note in notes:
        print_wrapped(console, note)
