"""What an upgrade of asrflow reruns on a user's finished workflow, guarded.

Snakemake reruns a job whose rule's script is newer than its outputs (its code trigger, by the
script's mtime: ``snakemake.persistence.Persistence._code`` leaves scripts to it). ``git pull``
rewrites only the files that changed, so a commit that edits ``scripts/train.py`` reruns every
finished train job of every user who pulls it, and everything after those jobs, even where the
edit changes no result. Library code (``src/asrflow``) reruns nothing by itself; a change there
that can change a result bumps a version the rules hash (``SCORING_VERSION``,
``DECODER_VERSION``), so that only what it touches reruns.

The scripts are thin Snakemake adapters and should rarely change. This test makes each change
deliberate: :data:`RECORDED` holds every script's SHA-256. After an edit that is meant to rerun
users' work, record the new hashes (``uv run python -m tests.test_rerun_triggers``) and say in
CHANGELOG.md which rules rerun; otherwise move the change into ``src/asrflow``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"
RECORDED = Path(__file__).with_name("script_hashes.json")


def script_hashes(folder: Path = SCRIPTS) -> dict[str, str]:
    """``{file name: sha256}`` of every script of the rules, in name order."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.glob("*.py"))
    }


def changed_scripts(recorded: dict[str, str], now: dict[str, str]) -> list[str]:
    """One line per script that is new, gone or edited since ``recorded``."""
    lines = [f"scripts/{name}: new" for name in now.keys() - recorded.keys()]
    lines += [f"scripts/{name}: removed" for name in recorded.keys() - now.keys()]
    lines += [
        f"scripts/{name}: edited"
        for name in now.keys() & recorded.keys()
        if now[name] != recorded[name]
    ]
    return sorted(lines)


def test_the_scripts_are_those_recorded():
    changes = changed_scripts(json.loads(RECORDED.read_text()), script_hashes())
    assert not changes, (
        "\n".join(changes) + "\nOn a user's finished workflow, pulling this reruns every job of "
        "these scripts' rules and everything after them (Snakemake's code trigger goes by the "
        "script's mtime). Move the change into src/asrflow, or, if the rerun is meant, record "
        "it with `uv run python -m tests.test_rerun_triggers` and name the rules that rerun in "
        "CHANGELOG.md."
    )


def test_an_edited_new_or_removed_script_is_named(tmp_path):
    for name, text in (("train.py", "a"), ("report.py", "b"), ("evaluate.py", "c")):
        (tmp_path / name).write_text(text)
    recorded = script_hashes(tmp_path)
    assert changed_scripts(recorded, script_hashes(tmp_path)) == []
    (tmp_path / "train.py").write_text("a  # a comment is an edit too")
    (tmp_path / "report.py").unlink()
    (tmp_path / "plan.py").write_text("d")
    assert changed_scripts(recorded, script_hashes(tmp_path)) == [
        "scripts/plan.py: new",
        "scripts/report.py: removed",
        "scripts/train.py: edited",
    ]


def test_every_rule_runs_a_recorded_script():
    """The guard covers every rule: none runs shell commands or inline Python (whose text
    Snakemake compares instead) or a script outside scripts/."""
    recorded = json.loads(RECORDED.read_text())
    used = set()
    for smk in sorted((REPO / "rules").glob("*.smk")):
        lines = smk.read_text().splitlines()
        for number, line in enumerate(lines, 1):
            word, _, rest = line.strip().partition(":")
            if line.startswith("    ") and word in ("shell", "run", "notebook", "wrapper"):
                raise AssertionError(f"{smk.name}:{number}: a `{word}:` rule; use a script")
            if word == "script":
                target = (rest.strip() or lines[number].strip()).strip("\"'")
                assert target.startswith("../scripts/") or target.startswith("scripts/"), target
                assert Path(target).name in recorded, f"{smk.name}:{number}: {target}"
                used.add(Path(target).name)
    assert used == set(recorded), f"recorded, run by no rule: {set(recorded) - used}"


if __name__ == "__main__":
    RECORDED.write_text(json.dumps(script_hashes(), indent=2) + "\n")
    sys.stdout.write(f"recorded {len(script_hashes())} scripts in {RECORDED}\n")
