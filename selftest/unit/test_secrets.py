"""The plan's secrets (HF_TOKEN in engine.env, an API key in engine.flags, a variable the
plan marks) on plain data: which values are secrets, that no command line of a launch or a
probe carries one (they travel as the command's standard input, `docker run --env-file
/dev/stdin`), that no repr shows one, that a failing test's terminal output, JUnit and log
records show none, and that what the run keeps is this user's alone (0700, 0600)."""

from __future__ import annotations

import html
import json
import logging
import os
import shlex
import stat
import subprocess
import traceback
import xml.sax.saxutils
from pathlib import Path
from typing import Any

import pytest
import yaml

from infergate.checks.inimage import probe_command
from infergate.deploy.executor import Deployment
from infergate.deploy.state import DeployOptions
from infergate.engines.launch import ClusterJoined, Exec, Launch, Start
from infergate.engines.registry import plan_launch
from infergate.plan.apikey import HIDDEN, redact, redact_data
from infergate.plan.model import Inventory, InventoryError, parse_inventory
from infergate.plan.secrets import (
    RedactingFilter,
    is_secret_name,
    plan_secrets,
    private_dir,
    write_private,
)
from infergate.preflight.in_image import _probe
from infergate.remote.ssh import Ran
from selftest.suite import LAB_PLAN, PROJECT_CONFIG, ROOT, closed_plan

TOKEN = "hf_secret_token_7f3a9c"
KEY = "sk-engine-key-2b8e41"
MARKED = "marked-credential-55d0"
NODE_PASS = "node2-db-password-91"
SENT = "sk-sent-by-option-0c7d"
PLANS = {
    "vllm": "two-sparks-vllm.yaml",
    "sglang": "two-sparks-sglang.yaml",
    "vllm-ray": "two-sparks-vllm-ray.yaml",
}
EVERY = (TOKEN, KEY, MARKED, NODE_PASS)


def secret_plan(data: dict[str, Any]) -> dict[str, Any]:
    """DATA with HF_TOKEN, a key in the flags, a marked variable and a node's password."""
    engine = data["engine"]
    engine["flags"] = [*engine.get("flags", []), "--api-key", KEY]
    engine["env"] = {
        **engine.get("env", {}),
        "HF_TOKEN": TOKEN,
        "MY_OPAQUE_VALUE": MARKED,
        "TOKENIZERS_PARALLELISM": "false",
    }
    engine["secret_env"] = ["MY_OPAQUE_VALUE"]
    data["nodes"][1]["env"] = {"DB_PASSWORD": NODE_PASS}
    return data


def plan(kind: str = "vllm") -> Inventory:
    data = yaml.safe_load((ROOT / "inventories" / PLANS[kind]).read_text())
    return parse_inventory(secret_plan(data))


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("HUGGING_FACE_HUB_TOKEN", True),
        ("VLLM_API_KEY", True),
        ("OPENAI_APIKEY", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("DB_PASSWORD", True),
        ("hf_token", True),
        ("PASSWD", True),
        ("TOKENIZERS_PARALLELISM", False),
        ("NCCL_SOCKET_IFNAME", False),
        ("VLLM_HOST_IP", False),
        ("KEYBOARD", False),
        ("GITHUB_PAT", True),
        ("GIT_AUTH", True),
        ("OAUTH", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("SESSION_COOKIE", True),
        ("DB_PW", True),
        ("PATH", False),  # PAT is a word of its own, never a part of one
        ("LD_LIBRARY_PATH", False),
        ("PWD", False),
        ("AUTHOR", False),
        ("MAX_TOKENS", False),  # a count
    ],
)
def test_a_name_is_secret_by_a_word_of_it(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def test_a_name_is_secret_when_the_plan_marks_it() -> None:
    assert not is_secret_name("MY_OPAQUE_VALUE")
    assert is_secret_name("MY_OPAQUE_VALUE", ("MY_OPAQUE_VALUE",))
    assert plan().engine.secret_env == ("MY_OPAQUE_VALUE",)


def test_the_plan_secrets_are_every_secret_value_and_every_key() -> None:
    shadowed = "sk-from-the-environment"  # not sent (the option wins), but a secret still
    found = plan_secrets(plan(), SENT, {"OPENAI_API_KEY": shadowed})
    assert set(found) == {*EVERY, SENT, shadowed}
    assert "false" not in found  # TOKENIZERS_PARALLELISM
    assert set(plan_secrets(plan(), None, {"INFERGATE_API_KEY": SENT})) == {*EVERY, SENT}


def test_a_secret_the_plan_put_in_docker_args_is_hidden_too() -> None:
    data = secret_plan(yaml.safe_load((ROOT / "inventories" / PLANS["vllm"]).read_text()))
    data["engine"]["docker_args"] = [
        "-e",
        "VLLM_API_KEY=sk-in-docker-args",
        "--env=HF_HOME=/x",
        "--env",
        "AWS_SECRET_ACCESS_KEY=aws-secret-1",
    ]
    found = plan_secrets(parse_inventory(data))
    assert {"sk-in-docker-args", "aws-secret-1"} <= set(found)
    assert "/x" not in found


@pytest.mark.parametrize(
    "flags",
    [
        ["--hf-token", "hf_flag_token_9"],
        ["--hf-token=hf_flag_token_9"],
        ["--db-password", "hf_flag_token_9"],
    ],
)
def test_the_value_of_a_secret_flag_is_a_secret(flags: list[str]) -> None:
    data = secret_plan(yaml.safe_load((ROOT / "inventories" / PLANS["vllm"]).read_text()))
    data["engine"]["flags"] += [*flags, "--max-num-batched-tokens", "8192", "--tokenizer", "/m/t"]
    found = plan_secrets(parse_inventory(data))
    assert "hf_flag_token_9" in found
    assert {"8192", "/m/t"} & set(found) == set()


def test_a_urls_user_and_password_are_secrets() -> None:
    data = secret_plan(yaml.safe_load((ROOT / "inventories" / PLANS["vllm"]).read_text()))
    data["engine"]["env"]["HF_ENDPOINT"] = "https://mirror:hunter2-pw@hub.example/x"
    data["engine"]["flags"] += ["--model-loader-extra-config", "s3://ak:sk-url-99@bucket"]
    found = plan_secrets(parse_inventory(data))
    assert {"mirror:hunter2-pw", "hunter2-pw", "ak:sk-url-99", "sk-url-99"} <= set(found)
    assert [s for s in found if "hub.example" in s or "https" in s] == []


def test_a_value_too_short_to_be_a_secret_is_left_in_texts() -> None:
    data = secret_plan(yaml.safe_load((ROOT / "inventories" / PLANS["vllm"]).read_text()))
    data["engine"]["env"]["HF_HUB_OFFLINE_TOKEN"] = "1"
    assert "1" not in plan_secrets(parse_inventory(data))


@pytest.mark.parametrize("value", ["one\nINJECTED=two", "hf_{unknown}_secret"])
def test_a_plan_error_about_an_env_value_never_quotes_it(value: str) -> None:
    data = secret_plan(yaml.safe_load((ROOT / "inventories" / PLANS["vllm"]).read_text()))
    data["engine"]["env"]["HF_TOKEN"] = value
    with pytest.raises(InventoryError, match=r"engine.env.HF_TOKEN: ") as refused:
        parse_inventory(data)
    assert "INJECTED" not in str(refused.value)
    assert "_secret" not in str(refused.value)


@pytest.mark.parametrize("flags", [["--api-key", "sk-live-\x01abc"], ["--api-key=sk-live-\x01abc"]])
def test_a_plan_error_about_an_api_key_flag_never_quotes_the_key(flags: list[str]) -> None:
    data = secret_plan(yaml.safe_load((ROOT / "inventories" / PLANS["vllm"]).read_text()))
    data["engine"]["flags"] = flags
    with pytest.raises(InventoryError, match=r"engine.flags\[\d\]: .*control character") as refused:
        parse_inventory(data)
    assert "sk-live" not in str(refused.value)


def test_secret_env_names_a_variable() -> None:
    data = secret_plan(yaml.safe_load((ROOT / "inventories" / PLANS["vllm"]).read_text()))
    data["engine"]["secret_env"] = ["NOT A NAME"]
    with pytest.raises(InventoryError, match=r"engine.secret_env\[0\].*not an environment"):
        parse_inventory(data)


def test_no_repr_of_the_plan_shows_a_secret() -> None:
    inventory = plan()
    text = repr(inventory)
    assert "two-sparks" in text  # the repr is still there, without env and flags
    assert [s for s in EVERY if s in text] == []


def commands(launch: Launch) -> list[str]:
    """Every argv a launch runs, as one line each: the containers' commands, the exec'd
    processes and the cluster check."""
    argvs = [s.command for s in launch.steps if isinstance(s, Start | ClusterJoined)]
    argvs += [s.detached() for s in launch.steps if isinstance(s, Exec)]
    return [shlex.join(argv) for argv in argvs]


@pytest.mark.parametrize("kind", list(PLANS))
def test_no_command_line_of_a_launch_carries_a_secret(kind: str) -> None:
    """The commands are the containers' argv (`ps` on the node shows them); the env goes in
    the Engine API's create request (docker_cli.ContainerSpec.create_kwargs)."""
    inventory = plan(kind)
    launch = plan_launch(inventory, "run1")
    lines = commands(launch)
    assert [(s, ln) for ln in lines for s in EVERY if s in ln] == []
    assert [s for s in EVERY if s in repr(launch)] == []
    if kind != "sglang":  # its launcher names the flag it appends, from the env
        assert "--api-key" not in " ".join(lines)
    starts = [s for s in launch.steps if isinstance(s, Start)]
    env = [start.spec.create_kwargs()["environment"] for start in starts]
    assert all(e["HF_TOKEN"] == TOKEN for e in env)
    variable = "SGLANG_API_KEY" if kind == "sglang" else "VLLM_API_KEY"
    assert all(e[variable] == KEY for e in env)
    assert env[1]["DB_PASSWORD"] == NODE_PASS


def test_sglang_appends_its_key_to_its_own_argv_never_the_process_argv() -> None:
    start = next(s for s in plan_launch(plan("sglang"), "run1").steps if isinstance(s, Start))
    launcher = start.command[start.command.index("-c") + 1]
    assert "sys.argv += ['--api-key', os.environ.pop('SGLANG_API_KEY')]" in launcher
    without = parse_inventory(yaml.safe_load((ROOT / "inventories" / PLANS["sglang"]).read_text()))
    plain = next(s for s in plan_launch(without, "run1").steps if isinstance(s, Start))
    assert "-m sglang.launch_server" in shlex.join(plain.command)


STAND_IN = """import json, os, sys
cmdline = open("/proc/self/cmdline", "rb").read().decode()
print(json.dumps({"argv": sys.argv[1:], "cmdline": cmdline, "env": "SGLANG_API_KEY" in os.environ}))
"""


def test_sglangs_launcher_hands_the_key_to_its_parser_not_to_ps(tmp_path: Path) -> None:
    """The launcher, run for real, with a stand-in `sglang.launch_server` that reports what
    its argument parser would read and what the process's argv (`ps`) shows."""
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "__init__.py").write_text("")
    (tmp_path / "sglang" / "launch_server.py").write_text(STAND_IN)
    start = next(s for s in plan_launch(plan("sglang"), "run1").steps if isinstance(s, Start))
    command = list(start.command[start.command.index("python3") :])
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path), "SGLANG_API_KEY": KEY}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    seen = json.loads(done.stdout)
    assert seen["argv"][-2:] == ["--api-key", KEY]
    assert seen["argv"][:2] == ["--model-path", plan("sglang").model.path]
    assert KEY not in seen["cmdline"]
    assert seen["env"] is False  # its children do not inherit it


@pytest.mark.parametrize("kind", list(PLANS))
def test_the_probe_carries_no_secret_and_no_key(kind: str) -> None:
    inventory = plan(kind)
    spec, args, master = _probe(inventory, inventory.head, 0)
    command = " ".join(probe_command(args, master, "fresh"))
    assert [s for s in EVERY if s in command] == []
    assert "--api-key" not in command
    # the env goes in the create request's body (docker_api), never in the command
    assert spec.create_kwargs()["environment"]["HF_TOKEN"] == TOKEN


def test_hide_and_the_log_filter_take_every_secret_out() -> None:
    assert redact(f"a {TOKEN} b {KEY}", EVERY) == f"a {HIDDEN} b {HIDDEN}"
    record = logging.LogRecord("testinfra", logging.DEBUG, "f", 1, "RUN %s", (TOKEN,), None)
    RedactingFilter(EVERY).filter(record)
    assert record.getMessage() == f"RUN {HIDDEN}"


def test_what_the_run_keeps_is_this_users_alone(tmp_path: Path) -> None:
    old = os.umask(0)  # the most open umask: the modes must not depend on it
    try:
        folder = private_dir(tmp_path / "reports" / "run1")
        (folder / "open.log").write_text("was 0666\n")
        write_private(folder / "open.log", "line\n", append=True)
        write_private(folder / "new.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(folder.parent.stat().st_mode) == 0o700  # reports/, made on the way
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()} == {
        "open.log": 0o600,
        "new.json": 0o600,
    }
    assert (folder / "open.log").read_text() == "was 0666\nline\n"


def inspect_io(node: str, command: str, timeout_s: float, input: str | None = None) -> Ran:
    """A node whose shell answers with the plan's env (the evidence's one shell read is the
    kernel's OOM lines; the container's log and inspection come from the Engine API, and
    test_secrets_lab proves them hidden on a real launch)."""
    done = subprocess.run(["sh", "-c", f"echo HF_TOKEN={TOKEN}"], capture_output=True, text=True)
    return Ran(done.returncode, done.stdout, done.stderr)


def test_the_evidence_hides_the_plan_secrets_and_is_private(tmp_path: Path) -> None:
    inventory = plan()
    launch = plan_launch(inventory, "run1")
    nodes = {n.name: n for n in inventory.nodes}
    said: list[str] = []
    options = DeployOptions(tmp_path / "evidence", True, secrets=plan_secrets(inventory))
    with Deployment(launch, nodes, inspect_io, said.append, options) as deployment:
        deployment.say(f"echo {MARKED}")
        deployment.save_evidence()
    files = [p for p in (tmp_path / "evidence").rglob("*") if p.is_file()]
    assert len(files) == 3 * len(nodes)
    shell = [p for p in files if p.name == "kernel-oom.txt"]
    assert len(shell) == len(nodes)
    assert all(f"HF_TOKEN={HIDDEN}" in p.read_text() for p in shell)
    assert [p for p in files if TOKEN in p.read_text()] == []
    assert {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o600}
    assert [s for s in said if MARKED in s] == []


LEAKY = '''
import logging
import pytest

def test_leaky(inventory):
    """Prints, logs and fails with every secret, as a broken test or check might."""
    engine = inventory.engine
    print("env", dict(engine.env), engine.flags)
    logging.getLogger("testinfra").debug("RUN %s", dict(engine.env))
    logging.getLogger("other").warning("flags %s", engine.flags)
    assert dict(engine.env) == {}, engine.flags
'''


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_failing_test_shows_no_secret_anywhere(
    pytester: pytest.Pytester, workers: list[str]
) -> None:
    """The terminal (-vvv, --showlocals, live DEBUG logs) and the JUnit file of a run
    whose test fails printing, logging and asserting on the plan's secrets."""
    plan_path = closed_plan(pytester.path, secret_plan(yaml.safe_load(LAB_PLAN.read_text())))
    pytester.makepyfile(test_leaky_plan=LEAKY)
    logs = ("--log-level=DEBUG", "-o", "log_cli=true")
    texts = leaky_run(pytester, plan_path, *logs, "--api-key", SENT, *workers)
    assert [(where, s) for where, t in texts.items() for s in (*EVERY, SENT) if s in t] == []


def leaky_run(pytester: pytest.Pytester, plan_path: Path, *args: str) -> dict[str, str]:
    """The terminal (-vvv, --showlocals) and JUnit texts of a run of the test_leaky* test
    made in PYTESTER's folder, which fails; each shows the marker."""
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess(
        *PROJECT_CONFIG,
        f"--inventory={plan_path}",
        f"--junitxml={junit}",
        "-vvv",
        "--showlocals",
        "-k",
        "leaky",
        *args,
        str(ROOT / "tests_deploy"),
        *map(str, pytester.path.glob("test_leaky*.py")),
    )
    output = result.stdout.str() + result.stderr.str()
    assert "1 failed" in output, output
    texts = {"terminal": output, "junit": junit.read_text()}
    assert all(HIDDEN in t for t in texts.values()), texts
    return texts


# secrets as a hostile operator or plan writes them: a quote, a backslash, non-ASCII, HTML's
# and XML's specials, both quotes, a newline (only where no plan check refuses it first)
HOSTILE = [
    'pa"ss-word-1',
    "back\\slash\\key",
    "sécret-clé-ü",
    "sk-<&>-amp",
    "both'quotes\"-x",
    "new\nline-secret",
]


def forms(secret: str) -> set[str]:
    """Every way a text may show SECRET: as is, in JSON (ASCII or not), in a repr (either
    quote), in HTML or an XML attribute."""
    return {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
        repr(f"'\"{secret}")[4:-1],
        ascii(secret)[1:-1],
        html.escape(secret),
        html.escape(secret, quote=False),
        xml.sax.saxutils.quoteattr(secret)[1:-1],
    }


def shown(texts: dict[str, str], secret: str) -> list[tuple[str, str]]:
    return [(where, form) for where, t in texts.items() for form in forms(secret) if form in t]


def failure_text(secret: str) -> str:
    """A traceback whose message and locals quote SECRET, as pytest's long form prints them."""
    try:
        flags = ["--api-key", secret]
        raise AssertionError(f"flags {flags!r}, key {secret!r}")
    except AssertionError:
        return "".join(traceback.format_exc())


@pytest.mark.parametrize("secret", HOSTILE, ids=range(len(HOSTILE)))
def test_no_output_form_shows_a_hostile_secret(secret: str) -> None:
    """Each text the run writes, as its writer builds it: JSON (data hidden before it is
    serialised, and JSON text hidden after), a repr, a traceback, HTML."""
    data = {"Config": {"Env": [f"HF_TOKEN={secret}"], "Cmd": ["--api-key", secret]}}
    texts = {
        "json": json.dumps(redact_data(data, [secret])),
        "json-utf8": json.dumps(redact_data(data, [secret]), ensure_ascii=False, indent=2),
        "json-text": redact(json.dumps(data), [secret]),
        "json-text-utf8": redact(json.dumps(data, ensure_ascii=False), [secret]),
        "repr": redact(repr(data), [secret]),
        "traceback": redact(failure_text(secret), [secret]),
        "html": redact(html.escape(f"<td>{secret}</td>"), [secret]),
        "html-quoted": redact(f'<a title="{html.escape(secret)}">', [secret]),
    }
    assert shown(texts, secret) == []
    assert all(HIDDEN in t for t in texts.values())


@pytest.mark.parametrize("secret", HOSTILE, ids=range(len(HOSTILE)))
def test_the_deploy_log_shows_no_form_of_a_hostile_secret(secret: str) -> None:
    inventory = plan()
    said: list[str] = []
    nodes = {n.name: n for n in inventory.nodes}
    options = DeployOptions(None, True, secrets=(secret,))
    with Deployment(plan_launch(inventory, "run1"), nodes, inspect_io, said.append, options) as d:
        d.say(f"env {{'HF_TOKEN': {secret!r}}} {json.dumps(secret)} {secret!a}")
    assert shown({"deploy.log": "\n".join(said)}, secret) == []
    assert HIDDEN in said[0]


PLAN_ERRORS = {
    "-eHF_TOKEN=": ("docker_args", ["-eHF_TOKEN=@"], "engine.docker_args: -eHF_TOKEN=... "),
    "control character in -e": (
        "docker_args",
        ["-e", "HF_TOKEN=@\x01"],
        "engine.docker_args[1]: the value holds the control character",
    ),
    "control character in --env=": (
        "docker_args",
        ["--env=GITHUB_PAT=@\x7f"],
        "engine.docker_args[0]: the value holds the control character",
    ),
    "--hf-token": (
        "flags",
        ["--hf-token", "@\x01"],
        "engine.flags[1]: the value holds the control character",
    ),
    "--hf-token=": (
        "flags",
        ["--hf-token=@\x1b"],
        "engine.flags[0]: the value holds the control character",
    ),
}


@pytest.mark.parametrize("secret", ["hf_" + "a1b2" * 10, *HOSTILE[:5]], ids=range(6))
@pytest.mark.parametrize("kind", list(PLAN_ERRORS))
def test_a_plan_error_never_echoes_a_secret(kind: str, secret: str) -> None:
    """Each kind of plan error about a secret names its place and shows no part of it
    (a long token too: an error quotes 40 characters of a value)."""
    key, values, says = PLAN_ERRORS[kind]
    data = secret_plan(yaml.safe_load((ROOT / "inventories" / PLANS["vllm"]).read_text()))
    data["engine"][key] = [v.replace("@", secret) for v in values]
    with pytest.raises(InventoryError) as refused:
        parse_inventory(data)
    message = str(refused.value)
    assert says in message
    assert shown({"error": message}, secret) == []
    assert shown({"error": message}, secret[:12]) == []


LEAKY_KEY = '''
def test_leaky_key(api_key):
    """Fails showing the key the run sends, in a repr, as a broken test might."""
    key = api_key.value
    print("sending", repr(key), ascii(key))
    assert key is None, [key]
'''
# a header carries no non-ASCII key: that one is a usage error (test_hostile_command_line.py)
HOSTILE_KEY = "sk-\"q\\<&>'x-7d"


@pytest.mark.parametrize("source", ["--api-key", "INFERGATE_API_KEY", "OPENAI_API_KEY"])
def test_a_hostile_api_key_shows_in_no_form_in_the_terminal_or_junit(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    """An API key with a quote, a backslash and HTML's specials, from the option
    or the environment: its repr in a traceback, --showlocals and captured output, and
    JUnit's XML forms, all hidden."""
    for name in ("INFERGATE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    given = [f"--api-key={HOSTILE_KEY}"] if source == "--api-key" else []
    if not given:
        monkeypatch.setenv(source, HOSTILE_KEY)
    pytester.makepyfile(test_leaky_key=LEAKY_KEY)
    texts = leaky_run(pytester, closed_plan(pytester.path), *given)
    assert shown(texts, HOSTILE_KEY) == []
