"""A Diffusers pipeline's weights (:class:`vramcalc.results.pipeline.PipelineResult`): one row per
component, the two ways of placing them, and the card's verdict on the weights alone."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from vramcalc.render.escape import terminal_line
from vramcalc.render.text import gib, print_wrapped
from vramcalc.results.pipeline import PipelineResult


def _fits(fits: bool | None) -> str:
    return "fit" if fits else "do not fit"


def render_pipeline(found: PipelineResult, console: Console) -> None:
    dtype = f"cast to {found.precision}" if found.precision else "as stored"
    origin = f" ({found.source})" if found.source != found.name else ""
    print_wrapped(console, terminal_line(f"{found.name}: a Diffusers pipeline, its weights {dtype}{origin}"))
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    table.add_column("component")
    table.add_column("params", justify="right", no_wrap=True)
    table.add_column("GiB", justify="right", no_wrap=True)
    for component in found.components:
        table.add_row(terminal_line(component.name, 60), f"{component.params:,}", gib(component.bytes))
    console.print(table)
    offload = terminal_line(found.offload_component, 60)
    print_wrapped(
        console,
        f"all resident (pipe.to('cuda')): {gib(found.resident_bytes)} GiB; one at a time "
        f"(enable_model_cpu_offload()): {gib(found.offload_bytes)} GiB ({offload})",
    )
    if found.gpu is not None and found.available_bytes is not None:
        print_wrapped(
            console,
            terminal_line(
                f"on {found.gpu} ({gib(found.available_bytes)} GiB available): the weights "
                f"{_fits(found.resident_weights_fit)} all resident and {_fits(found.offload_weights_fit)} one at a time"
            ),
        )
    print_wrapped(
        console,
        "not estimated: the denoiser's and the VAE decoder's activations (a diffusion pipeline's steps are not "
        "modelled), so any verdict is on the weights alone; --precision fp16/bf16 casts the weights as "
        "torch_dtype does",
    )
