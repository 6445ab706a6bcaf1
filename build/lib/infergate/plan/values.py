"""Readers of single plan values: each checks one loaded-YAML value and returns it typed.

They know nothing of the plan's shape (plan/model.py does): every mistake in the YAML
surfaces as one InventoryError naming its key path, never as a TypeError from deep inside.
"""

from __future__ import annotations

import difflib
import math
import re
import string
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface, IPv4Network, ip_address
from types import MappingProxyType
from typing import TypeVar, cast
from weakref import WeakKeyDictionary

from infergate.plan.secrets import docker_env, flag_secrets, is_secret_name, secret_values

T = TypeVar("T")
Reader = Callable[[object, str], T]
F = TypeVar("F", bound=Callable[[object, str], object])

# The JSON Schema of each reader that knows more than its return type says (bounds, choices, a
# pattern), for plan_schema; where a schema goes, a fragment may hold a reader (a list's items).
# Weak: a parse makes readers of its own, such as int_in(0, 64) for each node.
SCHEMAS: WeakKeyDictionary[Callable[..., object], dict[str, object]] = WeakKeyDictionary()


def described(reader: F, **schema: object) -> F:
    """READER, with the JSON Schema of what it accepts (without `type`: what its return type
    says, narrowed by SCHEMA's pattern or length)."""
    SCHEMAS[reader] = schema
    return reader


def written_as(model: Reader[object]) -> Callable[[F], F]:
    """Give a reader that converts what MODEL read (to a frozenset, say) MODEL's schema."""
    return lambda reader: described(reader, **SCHEMAS[model])


@dataclass(frozen=True)
class Read:
    """One key a Section was asked for, as plan_schema sees the parser read a plan."""

    section: str  # the key path of the mapping, nodes[0].ssh
    known: tuple[str, ...]
    key: str
    how: str  # need: required; get: absent means a default; maybe: absent or null, unplanned
    reader: Reader[object]


# Set by plan_schema while it parses a probe plan: the parser's own account of every key it
# reads, so that the schema never keeps a second list of keys
READS: ContextVar[list[Read] | None] = ContextVar("READS", default=None)

ROOT = "<root>"
TODO = "TODO"  # a value left for the operator: `TODO`, or `TODO: what goes here`
# also a Host pattern of the ssh_config, a file name and a container's; HOST_NAME_MAX is 64
NODE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_TEXT = 4096  # one line (PATH_MAX); a longer argument fails the run, not the check
MAX_PROSE = 65_536  # a prompt, within Linux's 128 KiB for one argument
# ASCII digits within int64: str.isdigit takes '²', which int() refuses
WHOLE_NUMBER = re.compile(r"[0-9]{1,18}")
_ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DNS_LABEL_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_IFNAME_RE = re.compile(r"[^\s/:-][^\s/:]{0,14}")  # IFNAMSIZ, the kernel's forbidden chars
# C0 and C1 controls, DEL, and the line and paragraph separators that some tools split on;
# in one-line values also tab, newline and the invisible and bidi marks, which make a value
# read otherwise than it is (a prompt may need those in a right-to-left language)
_PROSE_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029"
CONTROLS = "\x00-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff"
_CONTROL_IN_PROSE = re.compile(f"[{_PROSE_CONTROLS}]")
_CONTROL = re.compile(f"[{CONTROLS}]")


class InventoryError(ValueError):
    """A problem in the inventory, located by its key path (`nodes[1].fabric.address`) and,
    where the plan was read from a file, its line there. A problem of the file as a whole
    (unreadable, not YAML) has the path ""."""

    more = False  # InventoryErrors: reading stopped at MAX_ERRORS

    def __init__(self, path: str, message: str, line: int | None = None) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message
        self.line = line

    def in_file(self, file: object) -> str:
        """As an operator reads it: `FILE, line N: key.path: what is wrong`."""
        return f"{shown(file)}{f', line {self.line}' if self.line else ''}: {self}"

    @property
    def errors(self) -> tuple[InventoryError, ...]:
        """Every problem this error stands for: itself alone, or InventoryErrors' list."""
        return (self,)


MAX_ERRORS = 20  # a plan's problems reported at once; a list of a million bad items is not


class InventoryErrors(InventoryError):
    """Several problems of one plan, each an InventoryError naming its key: the first one's
    path, message and line are this error's own, so a caller of one error reads the first."""

    def __init__(self, errors: list[InventoryError], more: bool = False) -> None:
        first = errors[0]
        super().__init__(first.path, first.message, first.line)
        self.all = tuple(errors[:MAX_ERRORS])
        self.more = more or len(errors) > MAX_ERRORS  # then reading stopped: not all are here
        lines = [str(e) for e in self.all] + (["(and more, not shown)"] if self.more else [])
        self.args = ("\n".join(lines),)

    def __str__(self) -> str:
        return str(self.args[0])

    @property
    def errors(self) -> tuple[InventoryError, ...]:
        return self.all

    def in_file(self, file: object) -> str:
        """`FILE: N problems:`, then each as `  line N: key.path: what is wrong`."""
        lines = [f"  {f'line {e.line}: ' if e.line else ''}{e}" for e in self.all]
        more = ["  (and more, not shown)"] if self.more else []
        return "\n".join([f"{shown(file)}: {len(self.all)} problems:", *lines, *more])


def grouped(errors: list[InventoryError]) -> InventoryError:
    """ERRORS as one exception: the error itself when there is one."""
    return errors[0] if len(errors) == 1 else InventoryErrors(errors)


def shown(file: object) -> str:
    """A path as a terminal can show it: as given, else escaped (a control character, a byte
    that is no UTF-8), and cut past 200 characters."""
    text = str(file)
    safe = text if text.isprintable() else ascii(text)[1:-1]
    return safe if len(safe) <= 200 else f"{safe[:160]}... ({len(text)} characters)"


def join(path: str, key: str) -> str:
    """The path of `key` inside the mapping at `path` (top-level keys stand alone)."""
    return key if path == ROOT else f"{path}.{key}"


def describe(value: object) -> str:
    """A value as an operator can find it in their YAML: `'abc' (str)`, `null`."""
    if value is None:
        return "null"
    shown = repr(value)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return f"{shown} ({type(value).__name__})"


def quoted(found: str) -> str:
    """FOUND as a message quotes it: its first 40 characters, and how long it is past them."""
    return repr(found) if len(found) <= 40 else f"{found[:40]!r}... ({len(found)} characters)"


def _wrong_type(path: str, expected: str, value: object) -> InventoryError:
    return InventoryError(path, f"expected {expected}, got {describe(value)}")


class Section:
    """One YAML mapping being read: hands out values read at their path, and collects the
    problems of every key (an unknown one among them) until `built` raises them all. A key
    whose reader failed reads as its default (None where it has none): `built` refuses it."""

    def __init__(
        self,
        data: object,
        path: str,
        known: tuple[str, ...],
        renamed: Mapping[str, str] = MappingProxyType({}),
    ) -> None:
        """RENAMED: the message for each key a plan held before it was renamed."""
        self.path = path
        self.known = known
        self.data = mapping(data, path)
        self.problems: list[InventoryError] = []
        self.suggested: set[str] = set()
        for key in self.data:  # unknown keys first: a typo must not read as "missing"
            if key not in known:
                said = renamed[key] if key in renamed else self._unknown(key)
                self.record(InventoryError(join(path, key), said))

    def _unknown(self, key: str) -> str:
        said = f"unknown key; known keys: {', '.join(sorted(self.known))}"
        close = difflib.get_close_matches(key, self.known, n=1)
        if not close:
            return said
        self.suggested.add(close[0])  # its "required key is missing" would tell the same
        return f"{said}; did you mean {close[0]}?"

    def at(self, key: str) -> str:
        return join(self.path, key)

    def record(self, error: InventoryError) -> None:
        """Keep ERROR's problems; past MAX_ERRORS stop reading, raising them all."""
        self.problems += error.errors
        if len(self.problems) > MAX_ERRORS or error.more:
            raise InventoryErrors(self.problems, more=True)

    def built(self, value: T) -> T:
        """VALUE, read from this mapping, once no key of it had a problem; else raise them."""
        if self.problems:
            raise grouped(self.problems)
        return value

    def _note(self, key: str, how: str, reader: Reader[object]) -> None:
        reads = READS.get()
        if reads is not None:
            reads.append(Read(self.path, self.known, key, how, reader))

    def _read(self, key: str, reader: Reader[T], failed: T) -> T:
        path = self.at(key)
        try:
            return reader(unfilled(self.data[key], path), path)
        except InventoryError as e:
            self.record(e)
        return failed

    def need(self, key: str, reader: Reader[T]) -> T:
        self._note(key, "need", reader)
        if key not in self.data:
            if key not in self.suggested:
                self.record(InventoryError(self.at(key), "required key is missing"))
            return cast(T, None)  # built refuses the section: the value is never used
        return self._read(key, reader, cast(T, None))

    def get(self, key: str, reader: Reader[T], default: T) -> T:
        self._note(key, "get", reader)
        return self._read(key, reader, default) if key in self.data else default

    def maybe(self, key: str, reader: Reader[T]) -> T | None:
        """An optional key whose absence (or null) means "not planned"."""
        self._note(key, "maybe", reader)
        value = self.data.get(key)
        return None if value is None else self._read(key, reader, None)


def unfilled(value: object, path: str) -> object:
    """VALUE, unless it is a TODO left (`infergate plan init` and `plan from-ansible` write
    them): that is refused naming its key, whatever the key takes."""
    if isinstance(value, str) and (value == TODO or value.startswith(f"{TODO}:")):
        what = value.removeprefix(TODO).removeprefix(":").strip()
        raise InventoryError(path, f"TODO left: {shown(what) if what else 'fill it in'}")
    return value


def mapping(value: object, path: str) -> dict[str, object]:
    if not isinstance(value, Mapping):
        raise _wrong_type(path, "a mapping", value)
    for key in value:
        if not isinstance(key, str):
            raise InventoryError(path, f"keys must be strings, got {describe(key)}")
    return dict(value)


def prose(value: object, path: str) -> str:
    """Text that may run over lines (a prompt): no control characters but tab and newline."""
    return _without(_CONTROL_IN_PROSE, _string(value, path, MAX_PROSE), path)


def text(value: object, path: str) -> str:
    """One line of text: a name, a path, a flag. A newline in a value that reaches an
    ssh_config, an env-file or a shell line would start a line of its own there."""
    return _without(_CONTROL, _string(value, path, MAX_TEXT), path)


def text_upto(limit: int) -> Reader[str]:
    """A reader of one line of text of at most LIMIT characters (the plan's name: a report's
    title, a word of the lock's command line)."""

    def read(value: object, path: str) -> str:
        return _without(_CONTROL, _string(value, path, limit), path)

    return described(read, type="string", pattern=SCHEMAS[text]["pattern"], maxLength=limit)


described(prose, pattern=f"^[^{_PROSE_CONTROLS}]*$", minLength=1, maxLength=MAX_PROSE)
described(text, pattern=f"^[^{CONTROLS}]*$", minLength=1, maxLength=MAX_TEXT)


def _string(value: object, path: str, limit: int) -> str:
    if not isinstance(value, str):
        hint = "; quote it in YAML" if isinstance(value, int | float) else ""
        raise InventoryError(path, f"expected a string, got {describe(value)}{hint}")
    if not value.strip():
        raise InventoryError(path, "must not be empty")
    if len(value) > limit:
        raise InventoryError(path, f"{len(value)} characters long; at most {limit}")
    return value


def argument(value: object, path: str) -> str:
    """Text that lands in a command line as a value: `-` first would make it an option
    (an image ref of `--privileged` did)."""
    found = text(value, path)
    if found.startswith("-"):
        raise InventoryError(path, f"{found!r} starts with '-': a command would read an option")
    return found


described(argument, pattern=f"^(?!-)[^{CONTROLS}]*$", minLength=1, maxLength=MAX_TEXT)


def _without(control: re.Pattern[str], found: str, path: str) -> str:
    hit = control.search(found)
    if hit:
        raise InventoryError(path, f"{found[:40]!r} holds the control character {hit[0]!r}")
    return found


def boolean(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise _wrong_type(path, "a boolean (true or false)", value)
    return value


def int_in(lo: int, hi: int) -> Reader[int]:
    """A reader of integers in [lo, hi]; YAML booleans are not integers here."""

    def read(value: object, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _wrong_type(path, "an integer", value)
        if value < lo or value > hi:
            raise InventoryError(
                path, f"{_short(value)} is out of range; expected between {lo} and {hi}"
            )
        return value

    return described(read, type="integer", minimum=lo, maximum=hi)


PORT = int_in(1, 65535)


def number_in(lo: float, hi: float, unit: str, *, above: bool = False) -> Reader[float]:
    """A reader of finite numbers (ints welcome) in [lo, hi], or (lo, hi] when `above`; the
    bounds keep a typo (`command_timeout_s: 1.0e-9` killed every command) out of the run."""

    def read(value: object, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _wrong_type(path, "a number", value)
        if isinstance(value, float) and not math.isfinite(value):
            raise InventoryError(path, f"expected a finite number, got {value}")
        if value < lo or value > hi or (value == lo and above):
            bounds = f"greater than {lo:g} and at most" if above else f"between {lo:g} and"
            raise InventoryError(
                path, f"{_short(value)} is out of range; expected {bounds} {hi:g}{unit}"
            )
        return float(value)

    low = {"exclusiveMinimum" if above else "minimum": lo}
    return described(read, type="number", **low, maximum=hi)


def _short(number: float) -> str:
    shown = f"{number:g}" if isinstance(number, float) else str(number)
    return shown if len(shown) <= 20 else f"{shown[:17]}... ({len(shown)} digits)"


def matching(pattern: re.Pattern[str], what: str) -> Reader[str]:
    """A reader of strings that must fully match `pattern`; `what` says what was expected."""

    def read(value: object, path: str) -> str:
        found = text(value, path)
        if not pattern.fullmatch(found):
            raise InventoryError(path, f"{quoted(found)} is not {what}")
        return found

    return described(read, type="string", pattern=f"^(?:{pattern.pattern})$", description=what)


NODE_NAME = matching(
    NODE_NAME_RE,
    "a valid node name (up to 64 letters, digits, '.', '_', '-'; a letter or digit first)",
)
IFNAME = matching(
    _IFNAME_RE, "a valid interface name (1-15 characters, no spaces, '/' or ':', no '-' first)"
)
ENV_NAME = matching(_ENV_KEY_RE, "an environment variable name")


def choice(options: tuple[str, ...]) -> Reader[str]:
    def read(value: object, path: str) -> str:
        found = text(value, path)
        if found not in options:
            raise InventoryError(path, f"{found!r} is not one of {', '.join(options)}")
        return found

    return described(read, type="string", enum=list(options))


def list_of(reader: Reader[T], *, min_len: int = 0) -> Reader[tuple[T, ...]]:
    """A reader of YAML lists whose items are read by `reader` at `path[i]`."""

    def read(value: object, path: str) -> tuple[T, ...]:
        if not isinstance(value, list | tuple):
            raise _wrong_type(path, "a list", value)
        if len(value) < min_len:
            raise InventoryError(path, f"expected at least {min_len} item(s), got an empty list")
        items: list[T] = []
        problems: list[InventoryError] = []
        for i, item in enumerate(value):  # every item's problems, MAX_ERRORS at most
            try:
                here = f"{path}[{i}]"
                items.append(reader(unfilled(item, here), here))
            except InventoryError as e:
                problems += e.errors
                if len(problems) > MAX_ERRORS or e.more:
                    raise InventoryErrors(problems, more=True) from None
        if problems:
            raise grouped(problems)
        return tuple(items)

    bounds = {"minItems": min_len} if min_len else {}
    return described(read, type="array", items=reader, **bounds)


def ipv4_address(value: object, path: str) -> IPv4Address:
    found = text(value, path)
    try:
        return IPv4Address(found)
    except ValueError:
        raise InventoryError(path, f"{found!r} is not an IPv4 address") from None


def ipv4_interface(value: object, path: str) -> IPv4Interface:
    """An address with its prefix (`192.168.200.12/24`): the prefix is what `ip addr` shows."""
    found = text(value, path)
    try:
        if "/" not in found:
            raise ValueError
        return IPv4Interface(found)
    except ValueError:
        raise InventoryError(
            path, f"{found!r} is not an IPv4 address with prefix, like 192.168.200.12/24"
        ) from None


def ipv4_network(value: object, path: str) -> IPv4Network:
    found = text(value, path)
    try:
        return IPv4Network(found)
    except ValueError:
        pass
    try:  # host bits set: name the network they meant
        hint = f"; did you mean {IPv4Interface(found).network}?"
    except ValueError:
        hint = ""
    raise InventoryError(path, f"{found!r} is not an IPv4 subnet like 192.168.200.0/24{hint}")


def host(value: object, path: str) -> str:
    """A management address: an IP address or a DNS name that SSH can reach."""
    found = text(value, path)
    try:
        address = ip_address(found)
    except ValueError:
        pass
    else:  # Python takes any text after '%' as an IPv6 scope, spaces and all
        if "%" in found and not _IFNAME_RE.fullmatch(found.partition("%")[2]):
            raise InventoryError(path, f"{found!r}: the scope after '%' is not an interface")
        return str(address)
    labels = found.removesuffix(".").split(".")
    dns_ok = len(found) <= 253 and all(_DNS_LABEL_RE.fullmatch(label) for label in labels)
    if not dns_ok or all(label.isdigit() for label in labels):  # all digits: a mistyped IP
        raise InventoryError(path, f"{found!r} is neither an IP address nor a DNS name")
    return found


# an IP address (a scope after '%' an interface) or a DNS name: never '-' first, a space or '/'
described(host, pattern=f"^(?!-)[^\\s/{CONTROLS}]*$", minLength=1, maxLength=253)


def env_map(placeholders: tuple[str, ...]) -> Reader[dict[str, str]]:
    """A reader of engine environments: names as the shell allows, values str (or int)."""

    def read(value: object, path: str) -> dict[str, str]:
        env: dict[str, str] = {}
        for key, raw in mapping(value, path).items():
            key_path = join(path, key)
            if not _ENV_KEY_RE.fullmatch(key):
                raise InventoryError(key_path, f"{key!r} is not an environment variable name")
            try:
                env[key] = _env_value(unfilled(raw, key_path), key_path, placeholders)
            except InventoryError as e:
                if not isinstance(raw, str) or not is_secret_name(key):
                    raise
                # a secret's value (HF_TOKEN): the error names the key, never quotes the value
                raise InventoryError(key_path, _hidden(e.message, raw), e.line) from None
        return env

    names = {"pattern": f"^(?:{_ENV_KEY_RE.pattern})$"}
    known = ", ".join(f"{{{p}}}" for p in placeholders)
    values = {"type": ["string", "integer"], "pattern": f"^[^{CONTROLS}]*$"}
    values["description"] = f"may hold {known}"
    return described(read, type="object", propertyNames=names, additionalProperties=values)


@written_as(list_of(text))
def flag_list(value: object, path: str) -> tuple[str, ...]:
    """engine.flags, one line each. An error about a secret flag's value (`--api-key K`,
    `--hf-token=T`) names its place, never the value."""
    return _hiding(value, path, flag_secrets)


@written_as(list_of(text))
def docker_arg_list(value: object, path: str) -> tuple[str, ...]:
    """engine.docker_args, one line each. An error about a secret's value (`-e HF_TOKEN=T`)
    names its place, never the value."""
    return _hiding(
        value, path, lambda args: [*flag_secrets(args), *secret_values(docker_env(args))]
    )


def _hiding(
    value: object, path: str, secrets_of: Callable[[list[str]], list[str]]
) -> tuple[str, ...]:
    """A list of one-line texts whose errors never quote an item holding one of SECRETS_OF
    the items."""
    try:
        return list_of(text)(value, path)
    except InventoryError as e:
        given = [x for x in value if isinstance(x, str)] if isinstance(value, list) else []
        secrets = secrets_of(given)
        hidden = []
        for error in e.errors:
            message = error.message
            for item in (x for x in given if any(s in x for s in secrets)):
                message = _hidden(message, item)
            hidden.append(InventoryError(error.path, message, error.line))
        raise grouped(hidden) from None


def _hidden(message: str, raw: object) -> str:
    """MESSAGE without the value it quotes (whole or its first 40 characters)."""
    text = str(raw)
    for shown in (repr(text), repr(text[:40]), text):
        message = message.replace(shown, "the value") if len(shown) >= 4 else message
    return message


def _env_value(raw: object, path: str, placeholders: tuple[str, ...]) -> str:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return str(raw)  # YAML `NCCL_IB_DISABLE: 0` means the string "0"
    if not isinstance(raw, str):
        raise _wrong_type(path, "a string (or an integer)", raw)
    _without(_CONTROL, raw, path)  # a newline would start a variable of its own in an env-file
    _check_placeholders(raw, path, placeholders)
    return raw


def _check_placeholders(raw: str, path: str, placeholders: tuple[str, ...]) -> None:
    """Fail now on what str.format would fail on later, when the node's env is built."""
    known = ", ".join(f"{{{p}}}" for p in placeholders)
    try:
        fields = [(f, c, s) for _, f, s, c in string.Formatter().parse(raw) if f is not None]
    except ValueError as e:
        raise InventoryError(
            path,
            f"malformed placeholder in {raw!r} ({e}); known placeholders: {known}; "
            "write {{ and }} for literal braces",
        ) from None
    for name, conversion, spec in fields:
        if name not in placeholders or conversion or spec:
            shown = name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
            raise InventoryError(
                path, f"unknown placeholder {{{shown}}} in {raw!r}; known placeholders: {known}"
            )
