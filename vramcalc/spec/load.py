"""Loading a spec: YAML or a mapping -> a validated :class:`~vramcalc.spec.models.Spec`, with every
validation problem as one line naming the file and the key; workload overrides; the JSON Schema.

The bundled examples (the repository's ``configs/`` directory, installed as the package
``vramcalc.examples``) stand in for a spec argument that names no file: :func:`load_spec_arg` is the
one loader of the SPEC arguments of every command.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from vramcalc.errors import SpecError
from vramcalc.files import parse_yaml, read_yaml
from vramcalc.spec.models import Spec, Workload

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

#: How pydantic tags a union member in an error's location ("list[str]", "literal['all-linear']").
_UNION_MEMBER = re.compile(r"^(int|float|str|bool|none|[a-z-]+\[.*\])$")


def _show_key(part: object) -> str:
    """A key as an error line shows it: quoted when empty, padded, unprintable or long."""
    text = str(part)
    if text and text.isprintable() and text == text.strip() and len(text) <= 80:
        return text
    return repr(text if len(text) <= 80 else text[:77] + "...")


def _section_model(root: Any, parts: list[Any]) -> Any:
    """The spec section (a pydantic model class) at ``parts`` below ``root``; None where the path leaves
    the models (a list item, a union member's tag, a plain value)."""
    import types
    import typing

    from pydantic import BaseModel

    model = root
    for part in parts:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return None
        found = None
        todo = [field.annotation]
        while todo and found is None:
            annotation = todo.pop()
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                found = annotation
            elif typing.get_origin(annotation) in (typing.Union, types.UnionType, typing.Annotated):
                todo += list(typing.get_args(annotation))
        if found is None:
            return None
        model = found
    return model


def _did_you_mean(root: Any, parts: list[Any]) -> str:
    """ "; did you mean 'layers'?" for an unknown key close to one of its section's keys, else ""."""
    import difflib

    key = parts[-1] if parts else None
    section = _section_model(root, parts[:-1]) if root is not None else None
    if not isinstance(key, str) or section is None or len(key) > 80:
        return ""
    close = difflib.get_close_matches(key.strip().lower(), list(section.model_fields), n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(name) for name in close)}?" if close else ""


def _error_parts(error: Any, root: Any = None) -> tuple[str, str, bool]:
    """(dotted location, message, whether it is a union member's) of one pydantic error; a union member's
    tag ("list[str]") is left out of the location. An unknown key gets the close keys of its section
    (``root``: the model validated)."""
    parts = list(error["loc"])
    if error["type"] == "extra_forbidden":
        return ".".join(_show_key(part) for part in parts), "unknown key" + _did_you_mean(root, parts), False
    message = error["msg"].removeprefix("Value error, ")
    member = next((i for i, part in enumerate(parts) if isinstance(part, str) and _UNION_MEMBER.match(part)), None)
    if member is not None:
        inner = ".".join(_show_key(part) for part in parts[member + 1 :])
        parts = parts[:member]
        message = f"{inner}: {message}" if inner else message
    return ".".join(_show_key(part) for part in parts), message, member is not None


def _format_validation_error(source: str, exc: ValidationError, root: Any = None) -> str:
    """One line per problem: the members of a union (each reports its own error) share one line."""
    problems: dict[object, tuple[str, list[str]]] = {}
    for index, error in enumerate(exc.errors()):
        loc, message, union = _error_parts(error, root)
        problems.setdefault(loc if union else index, (loc, []))[1].append(message)
    lines = []
    for loc, messages in problems.values():
        message = "; or ".join(dict.fromkeys(messages))
        lines.append(f"{source}: {loc}: {message}" if loc else f"{source}: {message}")
    return "\n".join(lines)


def parse_spec(data: Any, source: str = "<spec>") -> Spec:
    """Validate a parsed document as a :class:`Spec`; problems become one line each."""
    if data is None:
        raise SpecError(f"{source}: empty spec (expected a mapping with 'model' and 'workload')")
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a mapping with 'model' and 'workload', got {type(data).__name__}")
    try:
        return Spec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_format_validation_error(source, exc, Spec)) from None


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


def load_spec_arg(path: str | Path) -> tuple[Spec, str | None]:
    """The spec a command's SPEC argument names, and a note to show when it is a bundled example.

    A path that exists is always the file read. A name with no directory part that names nothing here
    (``bert-base.yaml`` or ``bert-base``) is the bundled example of that name, when there is one; a
    name that matches none keeps the "no such file" error, with the bundled examples of a close name.
    Errors name the argument as given."""
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
    return spec.model_copy(update={"workload": workload})


def json_schema() -> dict[str, Any]:
    """The JSON Schema of spec files, for editors."""
    return Spec.model_json_schema()
