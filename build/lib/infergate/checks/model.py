"""The model on every node: the directory, every shard the index names, equal sizes, a config
that parses, and byte-identical content (the two-Spark report rsynced 127 GB between nodes:
docs/notes.md#two-spark-report)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from infergate.plan.model import plan_key
from infergate.problems import Problem

PATH_KEY, MANIFEST_KEY = plan_key("model.path"), plan_key("model.manifest")


@dataclass(frozen=True)
class FileStat:
    size: int
    mtime: float
    ctime: float
    inode: int


def parse_find_files(text: str) -> dict[str, FileStat]:
    """Parse `find . -type f -printf '%P\\t%s\\t%T@\\t%C@\\t%i\\n'` run in the model directory.

    Sample line (tabs shown as spaces):
    ``model-00001-of-00039.safetensors 3984588696 1762412210.1 1762412210.1 2621441``
    """
    files = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 5 and parts[1].isdigit():
            files[parts[0]] = FileStat(
                int(parts[1]), float(parts[2]), float(parts[3]), int(parts[4])
            )
    return files


def parse_safetensors_index(text: str) -> set[str]:
    """The shard files named by `model.safetensors.index.json` (its `weight_map` values)."""
    doc = json.loads(text)
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict):
        raise ValueError("model.safetensors.index.json has no weight_map")
    return {str(v) for v in weight_map.values()}


def parse_manifest(text: str) -> dict[str, str]:
    """An expected sha256 per file: SGLang's `{"checksums": {name: sha256}}` (model_file_verifier
    generate), or the Hugging Face tree listing `[{"path": ..., "lfs": {"oid": sha256}}]`."""
    doc = json.loads(text)
    if isinstance(doc, dict) and isinstance(doc.get("checksums"), dict):
        return {str(k): str(v) for k, v in doc["checksums"].items()}
    if isinstance(doc, list):
        return {
            str(e["path"]): str(e["lfs"].get("oid") or e["lfs"]["sha256"])
            for e in doc
            if isinstance(e, dict) and isinstance(e.get("lfs"), dict)
        }
    raise ValueError("not a manifest: expected {'checksums': {...}} or a list with lfs entries")


def check_model_files(
    path: str, files: dict[str, FileStat] | None, shards: set[str] | None, config_error: str | None
) -> list[Problem]:
    """The model directory is there with every indexed shard and a config.json that parses."""
    if files is None:
        return [
            Problem(
                found=f"no model directory {path}",
                planned=f"the model at {path} on every node ({PATH_KEY})",
                remedy=f"copy it from a node that has it: `rsync -a --info=progress2 {path}/ "
                f"NODE:{path}/` over the fabric, then re-run the preflight",
            )
        ]
    problems = []
    missing = sorted((shards or set()) - set(files))
    if shards is None and not any(f.endswith(".safetensors") for f in files):
        missing = ["*.safetensors (no index and no weights)"]
    if missing:
        problems.append(
            Problem(
                found=f"{len(missing)} weight file(s) missing: {', '.join(missing[:5])}"
                + (" ..." if len(missing) > 5 else ""),
                planned="every shard model.safetensors.index.json names",
                remedy=_copy_missing(path, missing),
            )
        )
    if config_error:
        problems.append(
            Problem(
                found=f"config.json unusable: {config_error}",
                planned="a config.json that parses",
                remedy=f"copy config.json into {path} from the model's source",
            )
        )
    return problems


def _copy_missing(path: str, missing: list[str]) -> str:
    """One shard: copy that file; several: only what is absent (--ignore-existing leaves the
    shards already here alone: no re-copy of the whole model)."""
    one = len(missing) == 1 and "*" not in missing[0]
    source = [f"NODE:{path}/{missing[0]}"] if one else ["--ignore-existing", f"NODE:{path}/"]
    rsync = shlex.join(["rsync", "-a", "--info=progress2", *source, f"{path}/"])
    return f"on this node, from a node (NODE) that passes this check: `{rsync}`"


def check_model_parity(listings: dict[str, dict[str, FileStat]]) -> dict[str, list[Problem]]:
    """Every node has the same files with the same sizes as the node with the most files."""
    if not listings:
        return {}
    reference = max(listings, key=lambda n: (len(listings[n]), n))
    want = {name: s.size for name, s in listings[reference].items()}
    problems: dict[str, list[Problem]] = {}
    for node, files in listings.items():
        have = {name: s.size for name, s in files.items()}
        diff = sorted(n for n in want.keys() | have.keys() if want.get(n) != have.get(n))
        if diff:
            shown = ", ".join(
                f"{n} ({have.get(n, 'absent')} vs {want.get(n, 'absent')})" for n in diff[:3]
            )
            problems[node] = [
                Problem(
                    found=f"{len(diff)} file(s) differ from {reference}: {shown}"
                    + (" ..." if len(diff) > 3 else ""),
                    planned=f"the same files and sizes as {reference}",
                    remedy=f"re-copy from {reference}: `rsync -a --checksum <model dir>/ "
                    f"<this node>:<model dir>/`",
                )
            ]
    return problems


def check_model_hashes(
    hashes: dict[str, dict[str, str]], manifest: dict[str, str] | None
) -> dict[str, list[Problem]]:
    """Every file's SHA-256 agrees across nodes, and with the manifest when the plan has one."""
    problems: dict[str, list[Problem]] = {}
    for node, digests in hashes.items():
        others = {n: d for n, d in hashes.items() if n != node}
        bad = []
        for name, digest in sorted(digests.items()):
            if manifest is not None and name in manifest and manifest[name] != digest:
                bad.append(f"{name} sha256 {digest[:12]}… vs manifest {manifest[name][:12]}…")
            elif manifest is None and _outvoted(name, digest, others):
                bad.append(f"{name} sha256 {digest[:12]}… differs from every other node")
        if bad:
            problems[node] = [
                Problem(
                    found=f"{len(bad)} file(s) with other content: " + "; ".join(bad[:3]),
                    planned="byte-identical model files on every node"
                    + (f" matching the manifest ({MANIFEST_KEY})" if manifest is not None else ""),
                    remedy="re-copy those files from a good node (`rsync -a --checksum`), "
                    "then re-run the preflight with --model-hash=full",
                )
            ]
    return problems


def _outvoted(name: str, digest: str, others: dict[str, dict[str, str]]) -> bool:
    """With two nodes either could be wrong: both are named. With more, the odd one out."""
    seen = [d[name] for d in others.values() if name in d]
    return bool(seen) and all(s != digest for s in seen)
