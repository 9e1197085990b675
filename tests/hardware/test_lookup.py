"""Card lookup: the name-resolution table, capacity-only custom cards and user catalogs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from gpu_entries import lab_card

from vramcalc.errors import CatalogError, SpecError, UnitError, UnknownGPUError
from vramcalc.hardware import lookup
from vramcalc.hardware.catalog import load_catalog
from vramcalc.hardware.custom import CustomCard, custom_card, is_size
from vramcalc.hardware.lookup import active_catalog, find_card, load_user_catalog, use_gpus_file
from vramcalc.hardware.names import prefix_matches

# --- name resolution -----------------------------------------------------------------------------

# (name, card picked, whether a note is printed). Exact ids and aliases are silent; everything else
# names its pick. The picks follow the catalog's documented defaults (default_for in gpus.yaml).
RESOLUTION = [
    ("rtx-4090", "rtx-4090", False),  # id
    ("rtx4090", "rtx-4090", False),  # id without punctuation
    ("4090", "rtx-4090", False),  # alias
    ("a100-sxm4-80gb", "a100-80gb-sxm", False),  # alias
    ("h100", "h100-sxm", True),  # default_for: ambiguous, the documented default
    ("a100-80gb", "a100-80gb-sxm", True),  # default_for
    ("a100-80", "a100-80gb-sxm", True),  # start of a100-80gb-sxm and a100-80gb-pcie: the a100-80gb default
    ("a100 80", "a100-80gb-sxm", True),
    ("h100-80gb", "h100-sxm", True),  # matches the PCIe and SXM cards: the h100 default among them
    ("h100-80", "h100-sxm", True),
    ("a100 sxm", "a100-80gb-sxm", True),  # the two SXM A100s: the a100 default is one of them
    ("v100-32", "v100-32gb-sxm2", True),  # the smallest family holding both 32 GB V100s: v100-32gb
    ("gh200-144", "gh200-144gb", True),  # the one card it starts
    ("b2", "b200", True),
    ("rtx-409", "rtx-4090", True),  # ends inside a number: still being typed
]


@pytest.mark.parametrize(("name", "expected", "noted"), RESOLUTION)
def test_resolution_table(name: str, expected: str, noted: bool) -> None:
    card, note = find_card(name)
    assert card.id == expected
    assert (note is not None) == noted
    if note is not None:
        assert f"using {expected}" in note and repr(name) in note
        assert "\n" not in note


def test_default_pick_note_names_the_default_family_and_the_others() -> None:
    _, note = find_card("h100-80gb")
    assert note == (
        "'h100-80gb' matches several cards; using h100-sxm (NVIDIA H100 SXM5 80GB), the default for 'h100' "
        "(others: h100-pcie)"
    )


def test_single_match_note() -> None:
    _, note = find_card("b2")
    assert note is not None and note.startswith("'b2' is not a catalog name; using b200 (")


@pytest.mark.parametrize(
    ("name", "listed"),
    [
        ("a100 pcie", ["a100-40gb-pcie", "a100-80gb-pcie"]),  # 40 and 80 GB; the a100 default is an SXM card
        ("mi3", ["mi300x", "mi325x", "mi355x"]),  # no default_for covers the MI300 series
        ("rtx-309", ["rtx-3090", "rtx-3090-ti"]),
        ("rtx-40", ["rtx-4070", "rtx-4080", "rtx-4090"]),
    ],
)
def test_genuinely_ambiguous_names_list_the_cards(name: str, listed: list[str]) -> None:
    with pytest.raises(UnknownGPUError) as info:
        find_card(name)
    message = str(info.value)
    assert message.startswith(f"GPU {name!r} matches several cards: ") and message.endswith("(see 'vramcalc gpus')")
    cards = message.split(": ", 1)[1].split(";")[0].split(", ")
    assert set(listed) <= set(cards)


@pytest.mark.parametrize(
    ("name", "suggested"),
    [
        ("titan", "titan-rtx"),  # the Titan RTX and the Titan X are two products, neither a variant
        ("rtx-6000", "rtx-6000-ada"),  # the Quadro RTX 6000 is another card than the RTX 6000 Ada
        ("m4", "m4-max"),
        ("a100-80gb-smx", "a100-80gb-sxm"),
    ],
)
def test_a_whole_name_never_grows_into_another_product(name: str, suggested: str) -> None:
    with pytest.raises(UnknownGPUError) as info:
        find_card(name)
    message = str(info.value)
    assert message.startswith(f"unknown GPU {name!r}; did you mean {suggested}")
    assert "vramcalc gpus" in message and "\n" not in message


@pytest.mark.parametrize(
    ("norm", "key", "expected"),
    [
        ("a10080", "a100-80gb-sxm", True),  # a number ends where a capacity token goes on
        ("4060", "4060ti-16gb", False),  # a number ends where a different product word goes on
        ("rtx406", "rtx-4060-ti-16gb", True),  # inside a number
        ("m4", "m4-max", False),  # a whole token followed by a word that is not a variant
        ("h100", "h100-pcie", True),  # a whole token followed by a form factor
        ("", "h100", False),
    ],
)
def test_prefix_rule(norm: str, key: str, expected: bool) -> None:
    assert prefix_matches(norm, key) is expected


# --- capacity-only custom cards ------------------------------------------------------------------


# 48 GiB = 48 x 2^30 = 51,539,607,552 bytes; 48 GB = 48 x 10^9 bytes = 44.703 GiB.
@pytest.mark.parametrize(
    ("text", "n_bytes", "card_id", "label"),
    [
        ("48GiB", 48 * 2**30, "custom-48gib", "48 GiB"),
        ("48GB", 48 * 10**9, "custom-48gb", "48 GB"),
        ("24 GiB", 24 * 2**30, "custom-24gib", "24 GiB"),
        ("1.5TB", 1_500_000_000_000, "custom-1-5tb", "1.5 TB"),
        ("512mib", 512 * 2**20, "custom-512mib", "512 MiB"),
    ],
)
def test_a_size_is_a_custom_card(text: str, n_bytes: int, card_id: str, label: str) -> None:
    card, note = find_card(text)
    assert isinstance(card, CustomCard)
    assert (card.usable_bytes, card.id, card.label) == (n_bytes, card_id, label)
    assert note is not None and note.startswith(f"--gpu {text}: a custom card with {label} (")


def test_custom_card_note_text() -> None:
    assert find_card("48GiB")[1] == (
        "--gpu 48GiB: a custom card with 48 GiB (51,539,607,552 bytes) usable, capacity only; "
        "no bandwidth or TFLOPS figures"
    )
    assert "48 GB (48,000,000,000 bytes; 44.70 GiB)" in (find_card("48GB")[1] or "")


def test_sizes_and_names_are_told_apart() -> None:
    assert is_size("48GiB") and is_size("24 gb") and is_size("1.5TB")
    assert not is_size("4090") and not is_size("3090ti") and not is_size("a100-80gb") and not is_size("80")


@pytest.mark.parametrize(("text", "message"), [("4090B", "at least 1 MiB"), ("0GB", "at least 1 MiB")])
def test_too_small_a_custom_card_is_an_error(text: str, message: str) -> None:
    with pytest.raises(UnitError, match=message):
        custom_card(text)


def test_target_gpu_note_names_the_key() -> None:
    _, note = find_card("48GiB", "target.gpu")
    assert note is not None and note.startswith("target.gpu 48GiB: a custom card")


# --- user catalogs -------------------------------------------------------------------------------


@pytest.fixture
def user_file(tmp_path: Path):  # type: ignore[no-untyped-def]
    def write(entries: Any, text: str | None = None) -> Path:
        path = tmp_path / "my-gpus.yaml"
        path.write_text(text if text is not None else yaml.safe_dump(entries), encoding="utf-8")
        return path

    yield write
    use_gpus_file(None)


def test_user_entries_add_to_the_bundled_catalog(user_file) -> None:  # type: ignore[no-untyped-def]
    notes = use_gpus_file(user_file([lab_card()]))
    assert notes == []
    catalog = active_catalog()
    assert len(catalog.gpus) == len(load_catalog().gpus) + 1
    assert find_card("labcard") == (catalog.index["labcard"], None)
    assert find_card("lab-card-48gb")[0].usable_bytes == 48 * 2**30  # binary DRAM: 48 GiB
    assert find_card("h100")[0].id == "h100-sxm"  # the bundled cards are still there


def test_a_user_entry_with_a_bundled_id_replaces_it_with_a_note(user_file) -> None:  # type: ignore[no-untyped-def]
    path = user_file([lab_card(id="t4", aliases=[], name="T4 of my lab")])
    notes = use_gpus_file(path)
    assert notes == [f"{path}: entry t4 replaces the bundled entry of that id"]
    assert find_card("t4")[0].name == "T4 of my lab"
    assert len(active_catalog().gpus) == len(load_catalog().gpus)


def test_without_a_file_the_bundled_catalog_is_used(user_file) -> None:  # type: ignore[no-untyped-def]
    use_gpus_file(user_file([lab_card()]))
    use_gpus_file(None)
    assert active_catalog() is load_catalog()
    with pytest.raises(UnknownGPUError):
        find_card("labcard")


@pytest.mark.parametrize(
    ("entries", "text", "error", "message"),
    [
        ([lab_card(bus_width_bits="wide")], None, CatalogError, "entry lab-card-48gb: bus_width_bits: "),
        ([lab_card(colour="red")], None, CatalogError, "entry lab-card-48gb: colour: unknown field"),
        (None, "id: x\n", CatalogError, "expected a list of GPU entries"),
        (None, "", CatalogError, "expected a list of GPU entries"),
        (None, "- [\n", SpecError, "invalid YAML"),
        ([lab_card(), lab_card()], None, CatalogError, "entry lab-card-48gb: id: 'lab-card-48gb' is used twice"),
        ([lab_card(aliases=["a6000"])], None, CatalogError, "name 'a6000' is used twice (rtx-a6000, lab-card-48gb)"),
    ],
)
def test_bad_user_catalogs_name_the_file(user_file, entries: Any, text: str | None, error: type, message: str) -> None:  # type: ignore[no-untyped-def]
    path = user_file(entries, text)
    with pytest.raises(error) as info:
        load_user_catalog(path)
    text_of = str(info.value)
    assert text_of.startswith(f"{path}: ") and message in text_of and "\n" not in text_of
    assert lookup.active_catalog() is load_catalog()  # a bad file leaves nothing behind


def test_a_user_entry_needs_no_source(user_file) -> None:  # type: ignore[no-untyped-def]
    card = lab_card()
    del card["source"]
    use_gpus_file(user_file([card, lab_card(id="lab-card-2", aliases=[], source="measured in our lab")]))
    assert find_card("labcard")[0].source is None
    assert find_card("lab-card-2")[0].source == "measured in our lab"


# A bad value is one line naming the file, the entry and the field, in plain words: what was expected
# and what the file has (no pydantic wording such as "Input should be" or "Field required").
BAD_VALUES = [
    ({"capacity": "lots"}, "capacity: expected a number, got 'lots'"),
    ({"bus_width_bits": "wide"}, "bus_width_bits: expected a whole number, got 'wide'"),
    ({"bus_width_bits": 0}, "bus_width_bits: must be greater than 0, got 0"),
    ({"vendor": "nvida"}, "vendor: expected one of 'nvidia', 'amd', 'intel' or 'apple', got 'nvida'"),
    ({"capacity_is_binary": "maybe"}, "capacity_is_binary: expected true or false, got 'maybe'"),
    ({"source": 5}, "source: expected text, got 5"),
    ({"host_link": {"pcie_gen": 9}}, "host_link.pcie_gen: must be at most 7, got 9"),
    ({"host_link": "pcie"}, "host_link: expected a mapping of fields, got 'pcie'"),
    ({"colour": "red"}, "colour: unknown field"),
]


@pytest.mark.parametrize(("changes", "message"), BAD_VALUES, ids=[m.split(":")[0] for _, m in BAD_VALUES])
def test_a_bad_value_names_the_file_entry_and_field(user_file, changes: dict[str, Any], message: str) -> None:  # type: ignore[no-untyped-def]
    path = user_file([lab_card(**changes)])
    with pytest.raises(CatalogError) as info:
        load_user_catalog(path)
    assert str(info.value) == f"{path}: entry lab-card-48gb: {message}"


@pytest.mark.parametrize(
    ("field", "typo", "message"),
    [
        ("bandwidth_gb_s", "bandwith_gb_s", "bandwith_gb_s: unknown field; did you mean 'bandwidth_gb_s'"),
        ("name", "nme", "nme: unknown field; did you mean 'name'?"),
    ],
)
def test_a_misspelt_field_leads_with_did_you_mean(user_file, field: str, typo: str, message: str) -> None:  # type: ignore[no-untyped-def]
    card = lab_card()
    card[typo] = card.pop(field)  # the field is missing too: the typo explains it
    with pytest.raises(CatalogError) as info:
        load_user_catalog(user_file([card]))
    assert f": entry lab-card-48gb: {message}" in str(info.value)
    assert "missing" not in str(info.value)


def test_a_missing_field_is_named(user_file) -> None:  # type: ignore[no-untyped-def]
    card = lab_card()
    del card["capacity"]
    with pytest.raises(CatalogError, match=r"entry lab-card-48gb: capacity: missing \(every entry needs it\)$"):
        load_user_catalog(user_file([card]))


def test_a_missing_user_catalog_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="missing.yaml: no such file"):
        load_user_catalog(tmp_path / "missing.yaml")
