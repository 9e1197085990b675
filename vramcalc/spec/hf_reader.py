"""Typed reading of a transformers ``config.json``: every value an importer uses is checked here first,
so no arithmetic sees an unchecked value, and every error names the config file and field.
"""

from __future__ import annotations

from typing import Any

from vramcalc.errors import SpecError
from vramcalc.units import quoted

Config = dict[str, Any]
Model = dict[str, Any]
#: What a converter reads: spec keys (the ``model`` mapping of a spec, or some of its keys) and notes on what
#: the config says that they leave out, in order.
Imported = tuple[Model, list[str]]
#: The largest size or count a spec accepts (``PositiveInt`` in vramcalc/spec/models.py): a larger
#: config value is refused where the error can still name the config's own field.
MAX_FIELD = 10**7
#: The largest ``max_position_embeddings`` (a context length, not a tensor size: Llama 4 Scout has 10,485,760).
MAX_POSITIONS = 10**9


class Reader:
    """Typed field access: every value a converter uses is checked here first, so no arithmetic sees an
    unchecked value, and every error names the config file and field. JSON null counts as absent."""

    def __init__(self, config: Config, source: str) -> None:
        self.config, self.source = config, source

    def _first(self, names: tuple[str, ...]) -> tuple[str, Any]:
        """The first of ``names`` that has a value, and the value; else the first name and None."""
        for name in names:
            if self.config.get(name) is not None:
                return name, self.config[name]
        return names[0], None

    def _whole(self, name: str, value: Any, minimum: int, maximum: int = MAX_FIELD) -> int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 4096.0 is 4096; 4096.5 is refused below
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{self.source}: {name}: expected a whole number, got {quoted(value)}")
        if not minimum <= value <= maximum:
            raise SpecError(f"{self.source}: {name}: {quoted(value)} is out of range ({minimum} to {maximum:,})")
        return value

    def need(self, *names: str, minimum: int = 1) -> int:
        """A whole number the model needs: the first of ``names`` given, at least ``minimum``."""
        name, value = self._first(names)
        if value is None:
            model_type = quoted(self.config.get("model_type"))
            raise SpecError(f"{self.source}: {name}: missing (needed for model_type {model_type})")
        return self._whole(name, value, minimum)

    def count(self, *names: str, default: int | None, minimum: int = 1, maximum: int = MAX_FIELD) -> int | None:
        """An optional whole number: the first of ``names`` given, from ``minimum`` to ``maximum``; else ``default``."""
        name, value = self._first(names)
        return default if value is None else self._whole(name, value, minimum, maximum)

    def _typed(self, name: str, default: Any, kind: type | tuple[type, ...], expected: str) -> Any:
        value = self.config.get(name)
        if value is None:
            return default
        if not isinstance(value, kind):
            raise SpecError(f"{self.source}: {name}: expected {expected}, got {quoted(value)}")
        return value

    def flag(self, name: str, default: bool) -> bool:
        """A true/false field (a JSON boolean: the string "false" is not false)."""
        return bool(self._typed(name, default, bool, "true or false"))

    def fraction(self, name: str, default: float) -> float:
        """A probability in [0, 1) (a dropout rate)."""
        value = self._typed(name, default, (int, float), "a number")
        if isinstance(value, bool) or not 0 <= value < 1:
            raise SpecError(f"{self.source}: {name}: expected a number in [0, 1), got {quoted(value)}")
        return float(value)

    def text(self, name: str, default: str) -> str:
        return str(self._typed(name, default, str, "a string"))

    def architectures(self) -> str:
        """The ``architectures`` class names, space-separated ("" when absent)."""
        names = self._typed("architectures", [], list, "a list of class names")
        if not all(isinstance(item, str) for item in names):
            raise SpecError(f"{self.source}: architectures: expected a list of class names, got {quoted(names)}")
        return " ".join(names)

    def fail(self, name: str, message: str) -> SpecError:
        """An error about field ``name`` of this config (to raise)."""
        return SpecError(f"{self.source}: {name}: {message}")

    def names(self, name: str) -> list[str]:
        """A list of strings (``layer_types``); empty when absent."""
        values = self._typed(name, [], list, "a list of strings")
        if not all(isinstance(item, str) for item in values):
            raise self.fail(name, f"expected a list of strings, got {quoted(values)}")
        return list(values)

    def numbers(self, name: str) -> list[int]:
        """A list of whole numbers (``mlp_only_layers``); empty when absent."""
        values = self._typed(name, [], list, "a list of layer numbers")
        return [self._whole(name, item, 0) for item in values]

    def label_count(self) -> int:
        """How many labels the config has: ``id2label``'s entries, else ``num_labels``, else 2 (transformers'
        default, which builds a 2-label head when neither is given)."""
        labels = self._typed("id2label", {}, dict, "a mapping of label ids to names")
        if labels:
            return len(labels)
        return self.count("num_labels", default=2) or 2
