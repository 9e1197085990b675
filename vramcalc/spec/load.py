"""Loading a spec: YAML or a mapping -> a validated :class:`~vramcalc.spec.models.Spec`, with every
validation problem as one line naming the file and the key; workload overrides; the JSON Schema.

The bundled examples (the repository's ``configs/`` directory, installed as the package
``vramcalc.examples``) stand in for a spec argument that names no file: :func:`load_spec_arg` is the
one loader of the SPEC arguments of every command but ``check``, a CI gate, which reads only files
that exist (:func:`missing_spec`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from vramcalc.errors import SpecError
from vramcalc.files import parse_yaml, read_yaml
from vramcalc.spec.models import Spec, Workload, with_image_tokens
from vramcalc.spec.validate import _format_validation_error, validate_spec

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable


def parse_spec(data: Any, source: str = "<spec>") -> Spec:
    """Validate a parsed document as a :class:`Spec`; problems become one line each."""
    if data is None:
        raise SpecError(f"{source}: empty spec (expected a mapping with 'model' and 'workload')")
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a mapping with 'model' and 'workload', got {type(data).__name__}")
    model = data.get("model")
    if isinstance(model, str) or (isinstance(model, dict) and "preset" in model):
        from vramcalc.spec.model_name import expand_spec  # a model by name, Hub id or path

        data = expand_spec(data, source)
    return validate_spec(data, source)


def load_spec(path: str | Path) -> Spec:
    """Load and validate a spec file."""
    path = Path(path)
    return parse_spec(read_yaml(path), str(path))


#: The package the examples are installed as (pyproject.toml maps it to the repository's configs/).
EXAMPLES_PACKAGE = "vramcalc.examples"
#: Longest description :func:`example_description` gives (the list is one line per example).
DESCRIPTION_CHARS = 100


def _examples_dir() -> Traversable | None:
    """The directory of the bundled examples: the installed ``vramcalc.examples`` package, else (run
    from a source checkout, or an editable install, where that package is not importable) the
    checkout's configs/ directory beside the ``vramcalc`` package; None when there is neither."""
    from importlib.resources import files

    try:
        return files(EXAMPLES_PACKAGE)
    except ModuleNotFoundError:
        checkout = Path(__file__).resolve().parent.parent.parent / "configs"
        return checkout if checkout.is_dir() else None


def bundled_examples() -> dict[str, Traversable]:
    """The bundled example specs by file name (``bert-base.yaml``), sorted by name."""
    folder = _examples_dir()
    if folder is None:
        return {}
    found = {item.name: item for item in folder.iterdir() if item.name.endswith(".yaml") and item.is_file()}
    return dict(sorted(found.items()))


def find_example(name: str) -> tuple[str, str] | None:
    """(file name, text) of the bundled example ``name`` names: the file name itself (``bert-base.yaml``)
    or without its suffix (``bert-base``); None when there is no such example."""
    examples = bundled_examples()
    for candidate in (name, f"{name}.yaml"):
        if candidate in examples:
            return candidate, examples[candidate].read_text(encoding="utf-8")
    return None


def close_examples(name: str) -> list[str]:
    """The bundled examples whose name is close to ``name`` (a typo's likely meaning), best first."""
    import difflib

    names = {file.removesuffix(".yaml"): file for file in bundled_examples()}
    stem = name.removesuffix(".yaml").removesuffix(".yml")
    return [names[match] for match in difflib.get_close_matches(stem, list(names), n=3, cutoff=0.6)]


def unknown_example(name: str) -> str:
    """The end of an error for a name that is neither a file nor an example: the close examples, if any."""
    close = close_examples(name)
    if not close:
        return ""
    return f"; bundled examples with a close name: {', '.join(close)} ('vramcalc examples' lists them all)"


#: Words a period ends without ending the sentence ("Dettmers et al. 2023").
_ABBREVIATIONS = ("al.", "e.g.", "i.e.", "etc.", "vs.", "approx.")


def _first_sentence(words: str) -> str:
    """Up to the first period that ends a sentence: outside parentheses, not an abbreviation's."""
    depth = 0
    for index, char in enumerate(words):
        if char == "(":
            depth += 1
        elif char == ")" and depth:
            depth -= 1
        elif char == "." and depth == 0 and words[index + 1 : index + 2] in (" ", ""):
            head = words[: index + 1]
            if not head.endswith(_ABBREVIATIONS):
                return head
    return words


def example_description(text: str) -> str:
    """One line about an example: the first sentence of its leading comment, else its ``name``."""
    comment = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("#").strip())
    words = " ".join(" ".join(comment).split())
    if not words:
        try:
            data = parse_yaml(text, "example")
        except SpecError:
            data = None
        name = data.get("name") if isinstance(data, dict) else None
        return str(name) if name is not None else ""
    sentence = _first_sentence(words)
    if len(sentence) <= DESCRIPTION_CHARS:
        return sentence
    return sentence[: DESCRIPTION_CHARS - 3].rsplit(" ", 1)[0].rstrip(",;:") + "..."


def _is_bare_name(path: Path) -> bool:
    """A name with no directory part (``bert-base.yaml``; pathlib reads ``./bert-base.yaml`` the same)."""
    return len(path.parts) == 1 and path.name not in ("", ".", "..")


def example_file(arg: str | Path) -> str | None:
    """The file of the bundled example a SPEC argument falls back to (see :func:`load_spec_arg`): a bare
    name that names nothing here and is an example's name; None otherwise, and for examples that are
    not files on disk (a zipped installation)."""
    import os

    path = Path(arg)
    if not _is_bare_name(path) or os.path.lexists(path):
        return None
    found = find_example(path.name)
    if found is None:
        return None
    item = bundled_examples()[found[0]]
    return os.path.realpath(item) if isinstance(item, Path) else None


def missing_spec(source: str) -> SpecError:
    """The error of ``vramcalc check`` for a spec file that does not exist. A CI gate reads only files
    that are there, so a bare name is never the bundled example of that name; the message says how to
    copy that example here, or lists the examples of a close name."""
    path = Path(source)
    found = find_example(path.name) if _is_bare_name(path) else None
    if found is not None:
        name = found[0]
        return SpecError(
            f"{source}: no such file (check reads only files that exist, never the bundled example {name}; "
            f"'vramcalc examples {name} > {name}' copies it here)"
        )
    return SpecError(f"{source}: no such file{unknown_example(path.name) if _is_bare_name(path) else ''}")


def load_spec_arg(path: str | Path) -> tuple[Spec, str | None]:
    """The spec a command's SPEC argument names, and a note to show when it is a bundled example.

    A path that exists is always the file read. A name with no directory part that names nothing here
    (``bert-base.yaml`` or ``bert-base``) is the bundled example of that name, when there is one; a
    name that matches none keeps the "no such file" error, with the bundled examples of a close name.
    Errors name the argument as given. ``vramcalc check`` never falls back (:func:`missing_spec`)."""
    import os

    path = Path(path)
    source = str(path)
    bare = _is_bare_name(path) and not os.path.lexists(path)
    if bare:
        example = find_example(path.name)
        if example is not None:
            name, text = example
            note = f"{source} is not a file here; using the bundled example {name}"
            return parse_spec(parse_yaml(text, source), source), note
    try:
        return load_spec(path), None
    except SpecError as exc:
        if bare and str(exc) == f"{source}: no such file":
            raise SpecError(f"{exc}{unknown_example(path.name)}") from None
        raise


def override_workload(spec: Spec, source: str, **changes: Any) -> Spec:
    """Return ``spec`` with workload keys replaced (CLI flags), validated like the file."""
    changes = {k: v for k, v in changes.items() if v is not None}
    if not changes:
        return spec
    # only the keys the spec gave: defaults stay unset, so they are still listed as assumptions
    data = {**spec.workload.model_dump(exclude_none=True, exclude_unset=True), **changes}
    new_split = {"prompt_len", "max_new_tokens"} & changes.keys()
    if new_split and "seq_len" not in changes and None not in (data.get("prompt_len"), data.get("max_new_tokens")):
        data.pop("seq_len", None)  # the context follows the new prompt_len + max_new_tokens
    try:
        workload = Workload.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_format_validation_error(f"{source}: workload", exc, Workload)) from None
    changed = spec.model_copy(update={"workload": workload})
    if workload.images is None:
        return changed
    try:  # the image rules concern the model too (model.vision)
        checked = Spec.model_validate(dict(changed))
    except ValidationError as exc:
        raise SpecError(_format_validation_error(source, exc, Spec)) from None
    return with_image_tokens(checked)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of spec files, for editors."""
    return Spec.model_json_schema()
