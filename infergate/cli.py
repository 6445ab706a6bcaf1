"""`infergate`: the gate's command. The phases run pytest on the installed suites (the
process becomes pytest, so its exit status and signals are pytest's own), each listing the
suite's options (infergate.options) in its help; `down` and `plan` work on a plan without
pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import NoReturn

from infergate.engines.container import (
    GATE_OPTIONS,
    allowed_grants,
    privileged_grants,
    refused_grants,
)
from infergate.options import (
    ALLOW,
    ANSIBLE_PLUGIN,
    FORBID,
    PLAN,
    SUITE_OPTIONS,
    TESTINFRA_PLUGIN,
    USER_CONFIG,
    Option,
    add_suite_options,
    installed,
)
from infergate.plan.example import write_example
from infergate.plan.loader import PLAN_ENV as ENV
from infergate.plan.loader import given_plan, load_plan
from infergate.plan.model import Inventory, InventoryError
from infergate.plan.values import shown

USAGE_ERROR = 4  # pytest's ExitCode.USAGE_ERROR
EXIT_STATUS = (
    "exit status, as pytest's: 0 green, 1 a test failed, 2 interrupted, 3 internal error, "
    "4 usage (a bad plan or command line), 5 no test collected (an error: a gate that "
    "checked nothing)"
)
# each phase's suites and marker expression (a -m given after them replaces the expression)
PHASES = {
    "preflight": (("infergate.tests_preflight",), "preflight"),
    "deploy": (("infergate.tests_deploy", "infergate.tests_inference"), "deploy or inference"),
    "smoke": (("infergate.tests_inference",), "inference"),
}
RECORDING_TEST = (
    "infergate.tests_inference.test_reference_parity"  # `reference record` runs it alone
)
ANSIBLE_INVENTORY = "ansible-inventory"
READER_HELP = (
    "ansible-inventory: Ansible reads it, with its inventory plugins and scripts (the default, "
    "where it is installed: pip install ansible-core); files: infergate reads the INI or YAML "
    "files and group_vars/, host_vars/ beside them"
)
PHASE_HELP = {
    "preflight": "read-only checks of every node before launch",
    "deploy": "launch the plan's engine, gate it, and run the inference tests against it",
    "smoke": "the inference tests (with --endpoint URL: against a server already running)",
}


class Parser(argparse.ArgumentParser):
    """argparse, with pytest's exit status for a usage error (argparse's own is 2, which
    pytest's callers read as 'interrupted')."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}\n")


def plan_summary(inventory: Inventory) -> str:
    """One line: the plan's name, engine and nodes."""
    nodes = ", ".join(n.where for n in inventory.nodes)
    return f"{inventory.name} ({inventory.engine.kind}, {len(inventory.nodes)} nodes: {nodes})"


def grant_lines(inventory: Inventory) -> list[str]:
    """The header's lines on what the plan grants its containers on every node, each grant
    with the key that asks for it (infergate.engines.container.privileged_grants)."""
    grants = privileged_grants(inventory)
    own = f"the gate's own ({GATE_OPTIONS})"
    if not grants:
        return [f"privileged: the plan asks for nothing beyond {own}"]
    lines = [f"privileged: beyond {own}, the plan grants its containers on every node:"]
    return lines + [f"  {g.name} ({g.key}): {g.what}" for g in grants]


def privilege_refusal(
    inventory: Inventory, path: Path, allow: str | None, source: str
) -> str | None:
    """The usage error for the grants of the plan at PATH that an operator's allow-list ALLOW
    (from SOURCE: --allow-privileged; --forbid-privileged is "") leaves out; None: no policy
    (ALLOW None), or nothing refused."""
    if allow is None:
        return None
    try:
        allowed = allowed_grants(allow)
    except ValueError as e:
        return f"{source}: {e}"
    refused = refused_grants(privileged_grants(inventory), allowed)
    if not refused:
        return None
    them = "it" if len(refused) == 1 else "them"
    names = ",".join(dict.fromkeys([*sorted(allowed), *(g.name for g in refused)]))
    return "\n".join(
        [f"{source}: the plan {shown(path)} grants its containers what this run refuses:"]
        + [f"  {g.key} asks for {g.name}: {g.what}" for g in refused]
        + [f"fix: take {them} out of the plan, or allow {them}: --allow-privileged={names}"]
    )


def pytest_argv(phase: str, suite: list[str], rest: list[str]) -> list[str]:
    """The pytest command line of PHASE: its installed suites by package, its marker, the
    suite's options given (infergate.options.PassOn's words), then the rest as they came."""
    suites, marker = PHASES[phase]
    # the suite uses testinfra's library, not its plugin: left out where it cannot load
    aside = ["-p", f"no:{TESTINFRA_PLUGIN}"] if installed(ANSIBLE_PLUGIN) else []
    argv = [sys.executable, "-m", "pytest", *aside, "--pyargs", *suites, "-m", marker]
    return argv + suite + rest


def plan_given(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Path:
    """--plan, else $INFERGATE_INVENTORY; a usage error without either, or with one empty."""
    try:
        given = given_plan(args.plan, os.environ)
    except InventoryError as e:
        parser.error(str(e))
    if given is None:
        parser.error(f"no plan: give {PLAN.name} PATH or set {ENV}=PATH")
    return given


def plan_and_ssh(
    path: Path, user_config: str | None, masters: Path | None
) -> tuple[Inventory, Path | None] | None:
    """The plan and its ssh_config: written for MASTERS (`down`'s own), or without them only
    composed, asking ssh nothing (`plan check`); None once the usage error is printed."""
    from infergate.remote.ssh_config import SshConfigError, control_dir, plan_ssh_config, ssh_config
    from infergate.remote.ssh_user_config import operator_ssh_config

    try:
        inventory = load_plan(path)
        user = operator_ssh_config(user_config, path)
        if masters is None:
            ssh_config(inventory, control_dir(), user=user, resolve=False)
            return inventory, None
        return inventory, plan_ssh_config(inventory, path, user, masters)
    except InventoryError as e:
        print(f"{PLAN.name} {e.in_file(path)}", file=sys.stderr)
    except SshConfigError as e:
        print(e.for_plan(path), file=sys.stderr)
    return None


def check_plan(path: Path, user_config: str | None, allow: str | None, source: str) -> int:
    """Load the plan as the gate does and compose its ssh_config: its summary and grants, or
    what is wrong, or the grants the operator's allow-list ALLOW refuses."""
    loaded = plan_and_ssh(path, user_config, None)
    if loaded is None:
        return USAGE_ERROR
    inventory = loaded[0]
    refused = privilege_refusal(inventory, path, allow, source)
    if refused:
        print(refused, file=sys.stderr)
        return USAGE_ERROR
    print("\n".join([f"{shown(path)}: {plan_summary(inventory)}", *grant_lines(inventory)]))
    return plan_findings(inventory)


def plan_findings(inventory: Inventory) -> int:
    """Run every judge that needs only the plan (PLAN_CHECKS); print each finding with its
    code and remedy; 1 when a fail-severity one found a problem, else 0."""
    from infergate.catalogue import CHECKS, FAIL
    from infergate.checks.plan_only import PLAN_CHECKS

    failed = False
    for test, judge in PLAN_CHECKS.items():
        entry = CHECKS[test]
        for node, problems in judge(inventory).items():
            for p in problems:
                print(
                    f"{entry.severity.upper()} {entry.code} {node}: {p.found}; planned: "
                    f"{p.planned}\n  fix: {p.remedy}"
                )
                failed = failed or entry.severity == FAIL
    return 1 if failed else 0


def print_schema() -> int:
    from infergate.plan.schema import plan_schema

    print(json.dumps(plan_schema(), indent=2))
    return 0


def from_ansible(inventory: Path, group: str | None, out: Path | None, reader: str | None) -> int:
    """The plan skeleton, and each note on stderr; or the file and key of the inventory that
    is wrong."""
    from infergate.plan.ansible import AnsibleError, plan_from_ansible

    program = None if reader == "files" else ansible_inventory_program()
    if program is None and reader == "ansible-inventory":
        where = f"on PATH nor beside {shown(sys.executable)}"
        print(
            f"{ANSIBLE_INVENTORY} is not installed, {where}: pip install ansible-core",
            file=sys.stderr,
        )
        return USAGE_ERROR
    try:
        skeleton = plan_from_ansible(inventory, group, program)
    except AnsibleError as e:
        print(e.in_file(e.file), file=sys.stderr)
        return USAGE_ERROR
    for note in skeleton.notes:
        print(f"{shown(inventory)}: {note}", file=sys.stderr)
    if out is None:
        print(skeleton.text, end="")
    else:
        out.write_text(skeleton.text)
    return 0


def ansible_inventory_program() -> str | None:
    """ansible-inventory on PATH, else beside this Python (ansible-core in infergate's venv)."""
    beside = str(Path(sys.executable).parent)
    return shutil.which(ANSIBLE_INVENTORY) or shutil.which(ANSIBLE_INVENTORY, path=beside)


def down(path: Path, run: str | None, user_config: str | None) -> int:
    """Remove RUN's containers (every run's but a live one's, when None) on every node."""
    from infergate.deploy.down import down as remove

    # masters of its own, never a live run's: `down` ends them when it is done
    with tempfile.TemporaryDirectory(prefix="ig-down-") as masters:
        loaded = plan_and_ssh(path, user_config, Path(masters))
        if loaded is None or loaded[1] is None:
            return USAGE_ERROR
        return remove(loaded[0], loaded[1], run, str(path))


def plan_init(out: Path, force: bool) -> int:
    """Write the example plan to OUT (over a file there only with FORCE); say what is next."""
    try:
        write_example(out, force)
    except FileExistsError:
        said = "exists; --force writes over it, or -o names another path"
        print(f"{shown(out)}: {said}", file=sys.stderr)
        return USAGE_ERROR
    except OSError as e:
        print(f"{shown(out)}: cannot write: {e.strerror}", file=sys.stderr)
        return USAGE_ERROR
    plan = shlex.quote(f"{PLAN.name}={shown(out)}")
    print(
        f"wrote {shown(out)}: an example plan of two GPU nodes (vLLM, tensor parallel 2; "
        "SGLang in its comments)\nnext:\n"
        "  1. replace every TODO in it; this lists those left, and passes once none is:\n"
        f"     infergate plan check {plan}\n"
        f"  2. check every node, read-only: infergate preflight {plan}\n"
        f"  3. launch, gate and smoke-test: infergate deploy {plan}"
    )
    return 0


def installed_version() -> str:
    """`NAME VERSION` of the distribution that installed the infergate package (looked up by
    the package: the distribution's name may change), or why there is none."""
    names = metadata.packages_distributions().get("infergate", [])
    if not names:
        return "infergate: no distribution provides it here (not installed)"
    return f"{names[0]} {metadata.version(names[0])}"


class Version(argparse.Action):
    """--version, looked up only when asked (packages_distributions reads every one)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str) -> None:
        super().__init__(option_strings, argparse.SUPPRESS, nargs=0, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[object] | None,
        option_string: str | None = None,
    ) -> None:
        print(installed_version())
        parser.exit()


def add_own(parser: argparse.ArgumentParser, option: Option) -> None:
    """OPTION of the suite's table as an argument this command reads itself."""
    parser.add_argument(*option.names, **option.arguments())


def add_plan(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(*PLAN.names, metavar=PLAN.metavar, help=f"the plan (default: ${ENV})")


def run_id_arg(text: str) -> str:
    """--run's value: a run id as the suite makes it; '' (an unset variable) or anything
    else is a usage error, never every run (that is --all-runs)."""
    from infergate.deploy.runs import RUN_ID

    if RUN_ID.fullmatch(text):
        return text
    raise argparse.ArgumentTypeError(
        f"{text[:40]!a}{'...' if len(text) > 40 else ''} is not a run id (YYYYMMDD-HHMMSS "
        "then 16 hex digits, as in the container names and labels); every run's: --all-runs"
    )


def policy(*given: tuple[str, str | None]) -> tuple[str | None, str]:
    """The operator's allow-list and where it came from: the first of GIVEN, (source, list)
    nearest the run first, that is set (--forbid-privileged sets ""); (None, "") if none is."""
    return next(((allow, source) for source, allow in given if allow is not None), (None, ""))


def make_parser() -> Parser:
    parser = Parser(prog="infergate", description="The inference cluster gate.", epilog=EXIT_STATUS)
    parser.add_argument("--version", action=Version, help="print the installed version, then exit")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for phase, text in PHASE_HELP.items():
        run = commands.add_parser(
            phase,
            help=text,
            allow_abbrev=False,
            description=f"{text}. Other arguments go to pytest as they are.",
        )
        add_suite_options(run)
    add_down(
        commands.add_parser(
            "down",
            help="remove a run's containers on every node",
            allow_abbrev=False,
            description="Remove by label what a run of this suite left on the nodes, nothing else.",
        )
    )
    reference = commands.add_parser("reference", help="record a parity reference")
    add_reference_commands(
        reference.add_subparsers(dest="reference_command", required=True, parser_class=Parser)
    )
    plan = commands.add_parser("plan", help="a first plan, its check, its schema, from Ansible")
    add_plan_commands(plan.add_subparsers(dest="plan_command", required=True, parser_class=Parser))
    return parser


def add_down(gone: argparse.ArgumentParser) -> None:
    add_plan(gone)
    which = gone.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--run", metavar="ID", type=run_id_arg, help="the run id (in its container names)"
    )
    which.add_argument("--all-runs", action="store_true", help="every run but a live one")
    add_own(gone, USER_CONFIG)


def add_reference_commands(references: argparse._SubParsersAction[Parser]) -> None:
    record = references.add_parser(
        "record",
        help="record the plan's parity prompts from its deployment (or --endpoint) into a file",
        description="Launch the plan (or use --endpoint URL) and record the greedy answers to "
        "inference.parity.prompts, with their logprobs, into OUT, a new file: the reference "
        "that inference.parity.reference names (docs/parity.md). Other arguments go to pytest.",
    )
    add_plan(record)
    record.add_argument("--out", metavar="OUT", required=True, help="the reference file (new)")
    endpoint = next(o for o in SUITE_OPTIONS if o.name == "--endpoint")
    record.add_argument(*endpoint.names, metavar="URL", help=endpoint.help)


def record_argv(args: argparse.Namespace, plan: Path, rest: list[str]) -> list[str]:
    """The pytest command line that records: the parity test alone, on the plan's launch or
    on --endpoint, with --record-reference."""
    aside = ["-p", f"no:{TESTINFRA_PLUGIN}"] if installed(ANSIBLE_PLUGIN) else []
    argv = [sys.executable, "-m", "pytest", *aside, "--pyargs", RECORDING_TEST, "-m", "inference"]
    argv += [f"{PLAN.name}={plan}", f"--record-reference={args.out}"]
    return argv + ([f"--endpoint={args.endpoint}"] if args.endpoint else []) + rest


def add_plan_commands(plans: argparse._SubParsersAction[Parser]) -> None:
    init = plans.add_parser("init", help="write an example plan whose TODOs you fill in")
    init.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        type=Path,
        default=Path("plan.yaml"),
        help="default: %(default)s",
    )
    init.add_argument("--force", action="store_true", help="write over an existing file")
    check = plans.add_parser("check", help="load the plan as the gate does; exit 4 if wrong")
    add_plan(check)
    for option in (USER_CONFIG, FORBID, ALLOW):
        add_own(check, option)
    plans.add_parser("schema", help="the plan's JSON Schema")
    ansible = plans.add_parser("from-ansible", help="a plan from an Ansible inventory")
    ansible.add_argument("ansible_inventory", metavar="INVENTORY", type=Path)
    ansible.add_argument("--group", help="only the hosts of this group (default: every host)")
    ansible.add_argument("-o", "--output", metavar="OUT", type=Path, help="default: stdout")
    ansible.add_argument("--reader", choices=(ANSIBLE_INVENTORY, "files"), help=READER_HELP)


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command in PHASES:
        command = pytest_argv(args.command, args.suite, rest)
        os.execv(command[0], command)
    if args.command == "reference":
        command = record_argv(args, plan_given(args, parser), rest)
        os.execv(command[0], command)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "down":
        return down(plan_given(args, parser), args.run, args.ssh_user_config)
    if args.plan_command == "check":
        allow, source = policy(
            ("--allow-privileged", args.allow_privileged),
            ("--forbid-privileged", "" if args.forbid_privileged else None),
        )
        return check_plan(plan_given(args, parser), args.ssh_user_config, allow, source)
    if args.plan_command == "init":
        return plan_init(args.output, args.force)
    if args.plan_command == "schema":
        return print_schema()
    return from_ansible(args.ansible_inventory, args.group, args.output, args.reader)


if __name__ == "__main__":
    sys.exit(main())
