"""Release numbers of the libraries a workload pins in ``versions:`` (bitsandbytes, vLLM, transformers)."""

from __future__ import annotations

import re

from vramcalc.errors import SpecError

#: ``0.41.1``, ``v0.6.4``, ``4.46.0.dev0``, ``0.45.0+cu121``, ``4.40.0rc1``: major, minor, optional patch,
#: then anything that starts with a separator or a letter (a pre-release is taken as the release it becomes).
_RELEASE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.+-]?[A-Za-z].*|[.+-].*)?$")


def release_key(text: str, library: str, example: str) -> tuple[int, int, int]:
    """``"0.41.1"`` -> (0, 41, 1); raises SpecError naming ``workload.versions.<library>``."""
    match = _RELEASE.match(text.strip())
    if match is None:
        raise SpecError(f"workload.versions.{library}: {text!r} is not a release number (e.g. {example})")
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)
