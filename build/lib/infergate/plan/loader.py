"""Reading a plan file: YAML that cannot hurt the controller, with every value's line kept.

A file past one of the limits (docs/internals.md#plan-file-limits) is refused as one
InventoryError naming the key and its line, before any value is constructed.
"""

from __future__ import annotations

import codecs
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from infergate.plan.model import Inventory, parse_inventory
from infergate.plan.values import ROOT, InventoryError, InventoryErrors, grouped, join

PLAN_OPTION = "--plan"  # the suite's and the command's; --inventory is its alias where free
PLAN_ENV = "INFERGATE_INVENTORY"  # the plan where no --plan names one (suite, command, down)
MAX_BYTES = 1024 * 1024  # a plan of 4,096 nodes; the shipped plans are under 8 KiB
MAX_DEPTH = 16  # the deepest key of a plan, nodes[0].fabric.hcas[0], is 4 levels down
MAX_VALUES = 100_000  # counted with every alias expanded; 2,000 nodes take 26,000, lab.yaml 82
MAX_INT_DIGITS = 30  # more than any bound needs; int() meets its own limit (4300) later

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_INT_TAG = "tag:yaml.org,2002:int"
_MERGE_TAG = "tag:yaml.org,2002:merge"
Lines = dict[str, int]  # key path -> its line in the file, 1-based


def given_plan(option: str | None, environ: Mapping[str, str]) -> Path | None:
    """--plan, else $INFERGATE_INVENTORY; None when neither is set. Set but empty is an
    InventoryError: `--plan="$PLAN"` with PLAN unset must not run another plan."""
    if option is not None:
        if not option:
            raise InventoryError("", f"{PLAN_OPTION} is empty: give the plan's path")
        return Path(option)
    given = environ.get(PLAN_ENV)
    if given == "":
        raise InventoryError("", f"{PLAN_ENV} is set but empty: give the plan's path, or unset it")
    return Path(given) if given else None


def load_plan(path: Path) -> Inventory:
    """Read and parse the plan file at PATH; raise InventoryError with the line of the key."""
    return parse_plan(_read(path))


def read_text(path: Path) -> str:
    """The text of the YAML file at PATH, once it is a regular file within the size limit
    and UTF-8; raise InventoryError (path "") otherwise."""
    return _decode(_read(path))


def parse_plan(raw: bytes) -> Inventory:
    """Parse a plan file's bytes; raise InventoryError with the line of the key."""
    data, lines = load_yaml(_decode(raw))
    try:
        return parse_inventory(data)
    except InventoryError as e:
        located = [InventoryError(x.path, x.message, line_of(x.path, lines)) for x in e.errors]
        raise (InventoryErrors(located, e.more) if e.more else grouped(located)) from None


def _read(path: Path) -> bytes:
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise InventoryError("", "not a regular file; give the path of a plan's YAML file")
        with path.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise InventoryError("", f"cannot read: {e.strerror}") from None
    if len(raw) > MAX_BYTES:
        raise InventoryError("", f"larger than {MAX_BYTES // 1024} KiB: not a plan")
    return raw


def _decode(raw: bytes) -> str:
    if raw.startswith(codecs.BOM_UTF8):
        raise InventoryError("", "starts with a byte-order mark; save it as UTF-8 without one", 1)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise InventoryError(
            "", f"byte 0x{raw[e.start]:02x} is not UTF-8; save the file as UTF-8", line
        ) from None


def load_yaml(text: str, tags: Mapping[str, object] | None = None) -> tuple[object, Lines]:
    """The YAML document in TEXT, and the line of each key path, once the node graph passed
    every check; raise InventoryError naming the key and its line. TAGS: local tags (Ansible's
    `!vault`), each read as the value given here."""
    try:
        return _checked(text, tags or {})
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        said = ", ".join(part for part in (e.context, e.problem) if part)
        raise InventoryError("", f"not valid YAML: {said}", line) from None
    except yaml.reader.ReaderError as e:
        line = text[: e.position].count("\n") + 1
        code = e.character if isinstance(e.character, int) else ord(e.character)
        raise InventoryError("", f"the character U+{code:04X} cannot be in YAML", line) from None
    except yaml.YAMLError as e:
        raise InventoryError("", f"not valid YAML: {e}") from None
    except RecursionError:  # the pure Python composer, before any check could count levels
        raise InventoryError("", f"nested deeper than {MAX_DEPTH} levels") from None


def _checked(text: str, tags: Mapping[str, object]) -> tuple[object, Lines]:
    loader_class: Any = type("TaggedLoader", (_Loader,), {}) if tags else _Loader
    for tag, value in tags.items():
        loader_class.add_constructor(tag, lambda _loader, _node, value=value: value)
    loader = loader_class(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None, {}
        walk = _Walk(loader)
        walk.lines[ROOT] = root.start_mark.line + 1
        walk.value(root, ROOT, 0)
        return loader.construct_document(root), walk.lines
    finally:
        loader.dispose()


class _Walk:
    """One pass over the composed nodes: limits, duplicate keys, each key's line. An alias is
    the same node object again, so its size is counted once and multiplied, never walked."""

    def __init__(self, loader: yaml.SafeLoader) -> None:
        self.loader = loader
        self.lines: Lines = {}
        self.sizes: dict[int, int] = {}

    def value(self, node: yaml.Node, path: str, depth: int) -> int:
        """The number of values under NODE with every alias expanded, itself included."""
        if id(node) in self.sizes:
            return self.sizes[id(node)]
        if depth > MAX_DEPTH:
            raise _refused(
                path, node, f"nested deeper than {MAX_DEPTH} levels (or an alias inside itself)"
            )
        if isinstance(node, yaml.MappingNode):
            size = 1 + sum(self._pair(k, v, path, depth) for k, v in self._pairs(node, path))
        elif isinstance(node, yaml.SequenceNode):
            size = 1 + sum(self._item(item, path, i, depth) for i, item in enumerate(node.value))
        else:
            self._scalar(node, path)
            size = 1
        if size > MAX_VALUES:
            raise _refused(path, node, f"over {MAX_VALUES} values, aliases expanded")
        self.sizes[id(node)] = size
        return size

    def _pairs(self, node: yaml.MappingNode, path: str) -> list[tuple[yaml.Node, yaml.Node]]:
        first: dict[tuple[str, str], int] = {}
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE_TAG:
                what = "a merge key (<<)" if key.tag == _MERGE_TAG else "a key that is not text"
                raise _refused(path, key, f"{what}: write each key out, once")
            line = key.start_mark.line + 1
            if (key.tag, key.value) in first:
                raise InventoryError(
                    join(path, key.value),
                    f"duplicate key (first at line {first[key.tag, key.value]}); "
                    "YAML would keep only the last",
                    line,
                )
            first[key.tag, key.value] = line
            self.lines[join(path, key.value)] = line
        pairs: list[tuple[yaml.Node, yaml.Node]] = node.value
        return pairs

    def _pair(self, key: yaml.Node, value: yaml.Node, path: str, depth: int) -> int:
        return self.value(value, join(path, key.value), depth + 1)

    def _item(self, item: yaml.Node, path: str, index: int, depth: int) -> int:
        here = f"{path}[{index}]"
        self.lines[here] = item.start_mark.line + 1
        return self.value(item, here, depth + 1)

    def _scalar(self, node: yaml.Node, path: str) -> None:
        """Construct it now, where its path and line are known (the document reuses it)."""
        if node.tag == _INT_TAG and len(node.value) > MAX_INT_DIGITS:
            digits = len(node.value)
            said = f"an integer of {digits} digits; no plan value needs over {MAX_INT_DIGITS}"
            raise _refused(path, node, said)
        try:
            self.loader.construct_object(node)
        except (ValueError, OverflowError) as e:  # a date like 2026-02-30
            raise _refused(path, node, f"{node.value[:40]!r} cannot be read: {e}") from None


def _refused(path: str, node: yaml.Node, message: str) -> InventoryError:
    return InventoryError(path, message, node.start_mark.line + 1)


def line_of(path: str, lines: Lines) -> int | None:
    """The line of PATH, or of the nearest key above it that the file has (a missing key's
    mapping, a defaulted key's section)."""
    while path and path not in lines:
        path = path[: max(path.rfind("."), path.rfind("["), 0)]
    return lines.get(path or ROOT)
