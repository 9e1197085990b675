"""`vramcalc check` without the CLI: expand paths, load each spec, resolve its target, compare.

A bad file never stops the others: its problems become :class:`CheckError` entries (one line each,
naming the file and field) and the run's exit code becomes 2, so nothing is reported as passing. A
file named that does not exist is such an error, never the bundled example of that name: a gate
must not pass on a file that is not there.
Pure: reads spec files, writes nothing, imports neither typer nor rich.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from vramcalc.errors import EXIT_BAD_INPUT, EXIT_DOES_NOT_FIT, EXIT_OK, SpecError, VramcalcError
from vramcalc.hardware.custom import CustomCard
from vramcalc.hardware.lookup import find_card
from vramcalc.paths import (
    exclude_patterns,
    excluded,
    is_pattern,
    real_path,
    spec_files_matching,
    spec_files_under,
)
from vramcalc.planning.budget import DEFAULT_MAX_GPUS, Budget, budget_for
from vramcalc.planning.nonspec import not_a_spec, read_document, refused
from vramcalc.spec.load import missing_spec, parse_spec
from vramcalc.spec.models import Spec
from vramcalc.spec.target import NO_RESERVE, Reserve

if TYPE_CHECKING:
    from vramcalc.hardware.lookup import Card
    from vramcalc.planning.fit import CardFit

SPEC_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class TargetFlags:
    """Command-line values that override every spec's ``target`` section, key by key."""

    gpus: tuple[str, ...] = ()
    count: int | None = None
    reserve: Reserve | None = None


@dataclass(frozen=True)
class CheckRow:
    """One spec on one card."""

    source: str
    name: str
    fit: CardFit


@dataclass(frozen=True)
class CheckError:
    """A spec that could not be checked; each message is one line naming the file."""

    source: str
    messages: tuple[str, ...]


@dataclass(frozen=True)
class Skipped:
    """A YAML file found by a search (or, with ``--skip-non-specs``, named) that is not a vramcalc spec."""

    source: str
    reason: str  # what it is instead, e.g. "an accelerate config"


@dataclass
class CheckReport:
    """Everything one `vramcalc check` run found."""

    rows: list[CheckRow] = field(default_factory=list)
    errors: list[CheckError] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """2 when any input was bad, else 1 when any spec does not fit, else 0."""
        if self.errors:
            return EXIT_BAD_INPUT
        return EXIT_DOES_NOT_FIT if any(not row.fit.fits for row in self.rows) else EXIT_OK


def _error(source: str, exc: VramcalcError) -> CheckError:
    """One message per line of the error, each naming the file; a line break inside the file name
    itself does not split a message (the renderers show it escaped)."""
    placeholder = "\x00source\x00"
    text = str(exc).replace(source, placeholder) if source else str(exc)
    lines = [line.replace(placeholder, source) for line in text.splitlines()] or ["unknown error"]
    return CheckError(source, tuple(line if line.startswith(source) else f"{source}: {line}" for line in lines))


def expand_paths(args: list[str], exclude: tuple[str, ...] = ()) -> tuple[list[str], list[CheckError]]:
    """Files as given; directories -> their *.yaml/*.yml files (recursively, hidden ones skipped);
    unquoted-glob leftovers such as 'configs/*.yaml' -> their matches. Duplicates are dropped, and so
    is every path an ``exclude`` pattern matches (:func:`vramcalc.paths.excluded`).

    Directory and pattern searches are bounded (depth, entries looked at, spec files found; see
    :mod:`vramcalc.paths`): beyond a bound the argument becomes one error naming it and the bound."""
    found, errors = _expand(args, exclude)
    return list(found), errors


@dataclass
class _Found:
    """A file to check: whether it was named on the command line, and the searches that found it."""

    explicit: bool = False
    searches: list[str] = field(default_factory=list)


def _expand(args: list[str], exclude: tuple[str, ...]) -> tuple[dict[str, _Found], list[CheckError]]:
    """The files to check, in order, each with how it was found (see :func:`expand_paths`); a file named
    several ways (a directory given twice, ``a/../a``, a symbolic link) is checked once, under the first."""
    found: dict[str, _Found] = {}
    first: dict[str, str] = {}  # real path -> the first spelling met
    errors: list[CheckError] = []
    for arg in args:
        try:
            paths, what, searched = _spec_files(arg, exclude)
        except SpecError as exc:
            errors.append(CheckError(arg, (str(exc),)))
            continue
        kept = [path for path in paths if not excluded(path, exclude)]
        if not paths:
            errors.append(CheckError(arg, (f"{arg}: {what}",)))
        elif not kept and searched:
            n = f"{len(paths)} file{'' if len(paths) == 1 else 's'}"
            errors.append(CheckError(arg, (f"{arg}: --exclude matches every file found here ({n}); nothing to check",)))
        for path in kept:
            entry = found.setdefault(first.setdefault(real_path(path), path), _Found())
            if searched:
                entry.searches.append(arg)
            else:
                entry.explicit = True
    return found, errors


def _spec_files(arg: str, exclude: tuple[str, ...] = ()) -> tuple[list[str], str, bool]:
    """The spec files one argument names, what to say when there are none, and whether it was a
    search (a directory or a pattern) rather than a file."""
    path = Path(arg)
    try:
        is_dir, exists = path.is_dir(), path.exists()
    except (OSError, ValueError):  # a name too long for the file system, or an embedded NUL
        is_dir, exists = False, True  # left to the spec reader, which reports it in one line
    if is_dir:
        none = "no *.yaml or *.yml files in this directory" + (" outside --exclude" if exclude else "")
        return spec_files_under(arg, SPEC_SUFFIXES, exclude), none, True
    if not exists and is_pattern(arg):
        return spec_files_matching(arg, SPEC_SUFFIXES), "no spec files match this pattern", True
    return [arg], "", False


def resolve_flag_gpus(flags: TargetFlags) -> tuple[list[Card], list[str]]:
    """The cards named by ``--gpu`` (an unknown name is an input error for the whole run): catalog
    names, ``local``, or sizes (capacity-only cards); a note for each name that was not exact."""
    gpus: list[Card] = []
    notes: list[str] = []
    for name in flags.gpus:
        try:
            gpu, note = find_card(name)
        except VramcalcError as exc:  # a card name is not the spec's fault: not prefixed with its file
            text = str(exc)
            raise type(exc)(text if text.startswith("--gpu") else f"--gpu: {text}") from None
        gpus.append(gpu)
        if note:
            notes.append(note)
    return gpus, notes


def card_budget(card: Card, reserve: Reserve, count: int = 1, sharded: bool = False) -> Budget:
    """The budget of a catalog card, the installed one, or a capacity-only custom card."""
    if isinstance(card, CustomCard):
        return Budget(card.id, card.name, card.usable_bytes, card.usable_basis, True, reserve, count, True, sharded)
    return budget_for(card, reserve, count, sharded)


def budgets_for(spec: Spec, source: str, flags: TargetFlags, flag_gpus: list[Card]) -> tuple[list[Budget], list[str]]:
    """The cards one spec is checked on: flags first, then the spec's ``target`` section."""
    target = spec.target
    notes: list[str] = []
    gpus = list(flag_gpus)
    if not gpus:
        if target is None or target.gpu is None:
            raise SpecError(
                f"{source}: target.gpu: no GPU to check against (add 'target: {{gpu: NAME}}' or pass --gpu)"
            )
        try:
            gpu, note = find_card(target.gpu, "target.gpu")
        except VramcalcError as exc:
            text = str(exc).removeprefix("target.gpu: ")
            raise SpecError(f"{source}: target.gpu: {text}") from None
        gpus = [gpu]
        if note:
            notes.append(f"{source}: {note}")
    count = gpu_count(spec, source, flags.count)
    sharded = spec.parallel is not None
    return [card_budget(gpu, reserve_for(spec, flags.reserve), count, sharded) for gpu in gpus], notes


def gpu_count(spec: Spec, source: str, flag: int | None) -> int:
    """GPUs the run is planned for: ``--gpus``, else ``target.count``, else 1. With a ``parallel`` section
    its GPU count; a ``--gpus`` or an explicit ``target.count`` that differs is bad input (the per-GPU
    figures follow the parallel section, so the two counts cannot both hold)."""
    target = spec.target
    given = target.count if target is not None and "count" in target.model_fields_set else None
    if spec.parallel is None:
        return flag or given or 1
    from vramcalc.planning.fit import plan_gpus  # the sharded-plan search only when a spec needs it

    gpus = plan_gpus(spec.parallel)
    for name, value in (("--gpus", flag), ("target.count", given)):
        if value is not None and value != gpus:
            raise SpecError(
                f"{source}: {name}: {value} GPUs, but the parallel section spreads the run over {gpus} "
                "(parallel.gpus, or data x tensor x pipeline x context); make them agree or drop one"
            )
    return gpus


def reserve_for(spec: Spec, flag: Reserve | None) -> Reserve:
    """``--reserve`` if given, else the spec's ``target.reserve``, else none."""
    if flag is not None:
        return flag
    return spec.target.reserve if spec.target and spec.target.reserve else NO_RESERVE


def check_spec(
    spec: Spec, source: str, flags: TargetFlags, flag_gpus: list[Card], max_gpus: int = DEFAULT_MAX_GPUS
) -> tuple[list[CheckRow], list[str]]:
    """Rows (and notes) for one loaded spec; raises :class:`VramcalcError` for bad input."""
    budgets, notes = budgets_for(spec, source, flags, flag_gpus)
    name = spec.name or Path(source).stem
    from vramcalc.planning.fit import ShardSearch, check_on

    search = ShardSearch(spec, max_gpus)
    return [CheckRow(source, name, check_on(spec, budget, search)) for budget in budgets], notes


def run_check(
    args: list[str],
    flags: TargetFlags,
    max_gpus: int = DEFAULT_MAX_GPUS,
    *,
    exclude: tuple[str, ...] = (),
    skip_non_specs: bool = False,
) -> CheckReport:
    """Check every spec named by ``args``; sharded plans are searched up to ``max_gpus``. Bad ``--gpu``
    names or ``--exclude`` patterns raise (nothing can be checked); a bad spec file is recorded and the
    others are still checked.

    Files found by a directory or pattern search that are not vramcalc specs
    (:mod:`vramcalc.planning.nonspec`) are skipped with one note each; a file named on the command line
    is checked, and is an error when it is not a spec, unless ``skip_non_specs``. A search whose every
    file is skipped is an error: it checked nothing."""
    exclude = exclude_patterns(exclude)
    flag_gpus, notes = resolve_flag_gpus(flags)
    found, errors = _expand(args, exclude)
    report = CheckReport(errors=errors, notes=notes)
    checked: set[str] = set()
    for source, how in found.items():
        try:
            if how.explicit and not os.path.lexists(source):  # never a bundled example of that name
                raise missing_spec(source)
            data, reason = read_document(source)
            if reason is not None and (skip_non_specs or not how.explicit):
                report.skipped.append(Skipped(source, reason))
                report.notes.append(not_a_spec(source, reason))
                continue
            if reason is not None:
                raise refused(source, reason)
            rows, file_notes = check_spec(parse_spec(data, source), source, flags, flag_gpus, max_gpus)
        except VramcalcError as exc:
            report.errors.append(_error(source, exc))
        else:
            report.rows += rows
            report.notes += file_notes
        checked.update(how.searches)
    _searches_without_specs(report, found, checked)
    if not report.rows and not report.errors:
        report.notes.append("nothing checked: every file was excluded (--exclude) or is not a vramcalc spec")
    return report


def _searches_without_specs(report: CheckReport, found: dict[str, _Found], checked: set[str]) -> None:
    """An error for each directory or pattern whose files were all skipped as not specs."""
    skipped = {item.source for item in report.skipped}
    searches = dict.fromkeys(arg for how in found.values() for arg in how.searches)
    for arg in searches:
        if arg not in checked:
            n = sum(arg in found[path].searches and path in skipped for path in found)
            what = f"{n} YAML file{'' if n == 1 else 's'}"
            message = f"{arg}: no vramcalc spec here ({what} skipped as not specs: see the notes); nothing to check"
            report.errors.append(CheckError(arg, (message,)))


def single_budget(
    spec: Spec, source: str, gpu: str | None, reserve: Reserve | None, *, required: bool = True
) -> tuple[Budget | None, list[str]]:
    """The one card a planning command uses: ``--gpu`` or the spec's ``target.gpu`` (None when
    neither names one and ``required`` is false)."""
    flags = TargetFlags((gpu,) if gpu else (), None, reserve)
    if not required and not gpu and (spec.target is None or spec.target.gpu is None):
        return None, []
    flag_gpus, notes = resolve_flag_gpus(flags)
    budgets, more = budgets_for(spec, source, flags, flag_gpus)
    return budgets[0], notes + more
