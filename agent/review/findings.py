"""Writing what a run found back into a FINDINGS.md file, in the style ``tools.knowledge`` reads.

An entry is a dated section: model and hardware in the heading with the verdict ("works with ..."),
the package versions installed on the host (a ``packages:`` line), the symptom, the root cause, the fix,
the effective-config fact the fix set, the working launch
command in a ``bash`` block (with a ``# works`` comment so the reader takes it as the working one), the
hypotheses the run ruled out with their evidence, and a reference to the run and its transcript.

The file is only ever appended to: the entry is parsed together with the existing text before
anything is written (it must read back as a ``works`` finding with the fix's flag), written with
``O_APPEND`` under an advisory lock, and afterwards the file must still begin with its previous bytes.
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import time
from pathlib import Path
from typing import Any

from agent.domain.case import LauncherSpec
from agent.domain.models import command_text
from agent.record.recorded import RecordedRun
from agent.record.redact import REDACTED, run_redactor
from agent.review.text import alternative_text
from agent.review.wording import count
from tools.engines import model_flags
from tools.fingerprint import arch_label, engine_label
from tools.knowledge import MAX_FINDINGS_BYTES, Finding, gpu_names, infer_features, parse_findings


class FindingsWriteError(ValueError):
    """A findings entry that cannot be written; the message says why, in one line."""


def _show(value: Any) -> str:
    return "(unset)" if value is None else ("(on)" if value is True else str(value))


def _plain(text: str) -> str:
    """Log text safe inside Markdown prose (no code spans, no heading or fence starts)."""
    return " ".join(text.replace("`", "'").split())


def working_config(run: RecordedRun) -> tuple[dict[str, Any], dict[str, str]]:
    """Flags and env of the configuration that served correctly and was confirmed (the confirmation
    re-run's; else the fixing experiment's baseline plus its change: also when the confirmation was another
    value of the fix's own setting, a test launched from the failing configuration)."""
    c = run.conclusion or {}
    confirm = run.run_of(c.get("confirmation_experiment_id"))
    if confirm is not None and confirm.experiment.get("purpose") == "confirm":
        base = confirm.experiment.get("baseline") or {}
        return dict(base.get("flags") or {}), dict(base.get("env") or {})
    fix = run.run_of(c.get("fix_experiment_id"))
    if fix is None:
        raise FindingsWriteError(f"{run.path}: the fixing experiment is not in the transcript")
    base = fix.experiment.get("baseline") or {}
    flags, env = dict(base.get("flags") or {}), dict(base.get("env") or {})
    ch = fix.experiment.get("change") or {}
    target: dict[str, Any] = flags if ch.get("kind") == "flag" else env
    if ch.get("after") in (None, False):
        target.pop(str(ch.get("name")), None)
    else:
        target[ch["name"]] = ch["after"]
    return flags, env


def _confirmed_how(run: RecordedRun, c: dict[str, Any]) -> str:
    """How the fix was confirmed, for a findings entry: a re-run, or another value of its own setting that also
    served (``agent.planning.observations.sibling_passes``)."""
    confirm = run.run_of(c.get("confirmation_experiment_id"))
    if confirm is not None and confirm.experiment.get("purpose") == "test":
        ch = confirm.experiment.get("change") or {}
        return (f"with another value of the same setting ({ch.get('name')}: {_show(ch.get('after'))}, "
                f"{c.get('confirmation_experiment_id')}), which counts as a confirmation")
    return f"on a confirmation re-run ({c.get('confirmation_experiment_id')})"


def _secret_ref(name: str, value: object) -> str | None:
    """A secret the transcript redacted, written as a shell variable the reader sets
    (``--api-key "$API_KEY"``, ``HF_TOKEN="$HF_TOKEN"``); None for any other value."""
    if value != REDACTED:
        return None
    var = re.sub(r"[^A-Za-z0-9_]", "_", name.strip("-")).upper()
    return f'{name}="${var}"' if not name.startswith("-") else f'{name} "${var}"'


def _packages_line(installed: dict[str, str]) -> list[str]:
    """The entry's ``- Packages:`` line: the host's installed versions when the fix was confirmed
    (``HostFingerprint.installed``), which a later run compares with its host's to see what changed
    (``tools.knowledge.packages`` reads it back); none when the host's versions were not read."""
    if not installed:
        return []
    return ["- Packages: " + ", ".join(f"{name}=={version}" for name, version in sorted(installed.items()))]


def entry_for(run: RecordedRun, *, level: int = 2) -> str:
    """The FINDINGS.md section for an isolated run (see module docstring). Raises FindingsWriteError
    when the run did not isolate and confirm a fix."""
    c = run.conclusion or {}
    if c.get("status") != "isolated" or not c.get("fix"):
        why = c.get("status") or run.status
        raise FindingsWriteError(
            f"{run.path}: run {run.run_id} did not isolate a confirmed fix (status: {why}); a findings entry "
            "records a configuration that works"
        )
    fix = c["fix"]
    root = c.get("root_cause") or {}
    fp = run.fingerprint
    model = run.model_path()
    case = run.case_dict() or {}
    gpu = str(fp.get("gpu_name") or "unknown GPU")
    short_gpu = (gpu_names(gpu) or [gpu])[0]
    gpu_count = fp.get("gpu_count")
    hardware = f"{gpu_count}x {short_gpu}" if gpu_count else short_gpu
    date = time.strftime("%Y-%m-%d", time.localtime(run.first_ts or time.time()))
    fixed = {fix["name"]: fix.get("after")}
    removed = fix.get("after") in (None, False)  # the fix drops a flag or unsets a variable
    fix_text = command_text(fixed) if fix.get("kind") == "flag" else command_text({}, fixed)
    verdict = f"works without {fix['name']}" if removed else f"works with {fix_text}"
    if removed:
        fix_text = f"{'drop' if fix.get('kind') == 'flag' else 'unset'} {fix['name']}"
    lines = [f"{'#' * level} {date} — {model} on {hardware}: {verdict}", ""]
    lines.append(f"Written by `hypoloop findings add` from run {run.run_id}.")
    lines.append("")
    features = sorted(set((case.get("model") or {}).get("features") or []) | infer_features(model))
    lines.append(f"- Model: {model}" + (f" ({', '.join(features)})" if features else ""))
    lines.append(
        f"- Hardware: {gpu_count or '?'} × {gpu}, {arch_label(fp)}, driver "
        f"{fp.get('driver_version') or '?'}; {engine_label(fp)}"
    )
    lines += _packages_line(fp.get("installed") or {})
    lines.append(f"- Symptom: {_symptom(run)}")
    lines.append(f"- Root cause ({root.get('component', '?')}): {root.get('statement', '?')}")
    fix_run = run.run_of(c.get("fix_experiment_id"))
    lines.append(
        f"- Fix: {fix_text} (before: {_show(fix.get('before'))}); it served correctly in experiment "
        f"{fix_run.step if fix_run else '?'} and again {_confirmed_how(run, c)}"
    )
    fact = _fix_fact(run, fix)
    if fact:
        lines.append(f"- Effective config of the working run: {fact[0]}={fact[1]}")
    for a in c.get("alternatives") or []:  # root fixes first, then by performance cost
        lines.append(f"- Alternative: {_plain(alternative_text(a))}")
    lines += _working_command(run)
    lines += _ruled_out(run, c.get("refuted") or [])
    lines += _not_separated(c.get("untested") or [])
    host_s = float(c.get("host_seconds") or 0.0)
    lines.append(
        f"Reference: hypoloop run {run.run_id}, {count(c.get('launches'), 'launch')}, "
        f"{count(host_s, 'host-second', fmt='.0f')}; "
        f"transcript {run.path.resolve()} (review it with `hypoloop report`)."
    )
    # Secrets never reach a notes file (the transcript is redacted already; an older one may not be).
    return run_redactor()("\n".join(lines) + "\n")


def _unset_env(run: RecordedRun) -> list[str]:
    """The environment variables the fix (or a blocker adopted before it) unset, in that order; the
    working command must run without them."""
    c = run.conclusion or {}
    changes = [*(c.get("blockers") or []), c.get("fix") or {}]
    names = [str(ch["name"]) for ch in changes if ch.get("kind") == "env" and ch.get("after") in (None, False)]
    _, env = working_config(run)
    return [n for n in dict.fromkeys(names) if n not in env]


def working_command(run: RecordedRun, *, host_env: bool = False) -> str:
    """The launch command of the configuration that served correctly and was confirmed, as one
    copy-paste shell command (the baseline's env vars and flags with the fix applied; secrets as shell
    variable references); ``host_env``: the case's ``[host] env`` too (what the launches ran with on that
    host). Raises FindingsWriteError when the run has no such configuration."""
    case = run.case_dict() or {}
    flags, env = working_config(run)
    if host_env:
        env = {**{str(k): str(v) for k, v in ((case.get("host") or {}).get("env") or {}).items()}, **env}
    launcher = _launcher(run, case)
    engine = _launcher_spec(case).engine_impl()
    cmd = [
        " ".join([*launcher, *(shlex.quote(a) for a in engine.model_args(launcher, run.model_path()))]),
        *(_secret_ref(k, v) or command_text({k: v}) for k, v in flags.items() if k not in model_flags()),
    ]  # the model flag is the engine's model argument above, once
    words = [_secret_ref(k, v) or command_text({}, {k: v}) for k, v in env.items()]
    unset = _unset_env(run)
    if unset:  # the fix took these out of the environment: a shell that sets them must not pass them on
        words.append("env " + " ".join(f"-u {shlex.quote(n)}" for n in unset))
    if host_env and words:  # one assignment a line: the command stays narrow and pastes the same
        return run_redactor()(" \\\n  ".join([*words, *cmd]))
    return run_redactor()(" ".join([*words, ""]) + " \\\n  ".join(cmd))


def _working_command(run: RecordedRun) -> list[str]:
    """The entry's fenced launch command of the working configuration (secrets as references)."""
    return [
        "",
        "```bash",
        f"# works: served correctly and again on a confirmation re-run (hypoloop run {run.run_id})",
        working_command(run),
        "```",
        "",
    ]


def _ruled_out(run: RecordedRun, refuted: list[dict[str, Any]]) -> list[str]:
    """The entry's "Ruled out by this run" list: each refuted hypothesis, why, and where (experiment, log lines)."""
    if not refuted:
        return []
    lines = ["Ruled out by this run:", ""]
    for r in refuted:
        why = "; ".join(_plain(str(e.get("detail", ""))) for e in r.get("evidence", [])) or "refuted"
        where = []
        for e in r.get("evidence", []):
            er = run.run_of(e.get("experiment_id"))
            if er is not None:
                where.append(
                    f"experiment {er.step}"
                    + (f", log line {', '.join(map(str, e['lines'][:4]))}" if e.get("lines") else "")
                )
        lines.append(
            f"- {r.get('id')}: {_plain(str(r.get('statement', '')))} — {why}"
            + (f" ({'; '.join(where)})" if where else "")
        )
    lines.append("")
    return lines


def _not_separated(untested: list[dict[str, Any]]) -> list[str]:
    """The entry's lines naming the open hypotheses no experiment separated from the fix."""
    lines = []
    unseparated = [u for u in untested if str(u.get("why", "")).startswith("not separated")]
    for u in unseparated:  # why: "not separated from the fix (EXP): DETAIL"
        head, _, detail = str(u.get("why")).partition(": ")
        lines.append(f"Not separated from the fix ({head.rsplit('(', 1)[-1].rstrip(')')}): {u.get('id')} — {_plain(detail)}.")
    if unseparated:
        lines.append("")
    return lines


def _launcher_spec(case: dict[str, Any]) -> LauncherSpec:
    """The case's launcher (engine, argv); SGLang's default when the recorded case has none."""
    try:
        return LauncherSpec.model_validate(case.get("launcher") or {})
    except ValueError:
        return LauncherSpec()


def _launcher(run: RecordedRun, case: dict[str, Any]) -> list[str]:
    """The launcher as it ran (the last launch command's first words, as many as the case's launcher
    has), else the case's (its engine's default when the case names none)."""
    spec = _launcher_spec(case)
    ran = run.launch_argv[: len(spec.argv)] if len(run.launch_argv) > len(spec.argv) else []
    argv = ran or list(spec.argv)
    out = []
    for i, a in enumerate(argv):
        python = i == 0 and (a == "{python}" or re.fullmatch(r"python[\d.]*", Path(a).name) is not None)
        out.append("python" if python else shlex.quote(a))
    return out


def _symptom(run: RecordedRun) -> str:
    """The failure the run debugged: the first baseline launch that failed (on a flaky failure the first
    may have served: its "ok" is not the symptom), else the first baseline launch."""
    bases = [r for r in run.executed() if r.experiment.get("purpose") == "baseline"]
    base = next((r for r in bases if (r.outcome or {}).get("stage") not in ("ok", "infra_error")), None)
    base = base or next(iter(bases), None)
    if base is None or base.outcome is None:
        return "see the run's transcript"
    o = base.outcome
    text = str(o.get("stage"))
    m = run.telling_match(o)
    if m is not None:
        line = m["line_numbers"][0] if m.get("line_numbers") else "?"
        text += f': "{_plain(str(m.get("first_line", "")))}" (log line {line})'
    bad = [p for p in o.get("probes", []) if not p.get("ok")]
    if bad:
        text += "; probe " + ", ".join(f"{p.get('probe_id')}: {p.get('status')}" for p in bad)
    return text


def _fix_fact(run: RecordedRun, fix: dict[str, Any]) -> tuple[str, str] | None:
    """The effective-config fact the fix sets (from the intervention that names it) and its value in the
    fixing run, e.g. ("kv_cache_dtype", "bf16")."""
    c = run.conclusion or {}
    fix_run = run.run_of(c.get("fix_experiment_id"))
    facts = ((fix_run.outcome or {}) if fix_run else {}).get("facts") or {}
    for h in run.hypotheses.values():
        for iv in h.added.get("interventions", []):
            if iv.get("fact") and fix.get("name") in iv.get("names", []) and iv["fact"] in facts:
                return str(iv["fact"]), str(facts[iv["fact"]])
    return None


def _heading_level(text: str) -> int:
    """The level of the dated headings already in a file (the most common one), else 2."""
    levels = [len(m.group(1)) for m in re.finditer(r"^(#{1,6})\s+\S*\d{4}-\d{2}-\d{2}", text, re.MULTILINE)]
    return max(set(levels), key=levels.count) if levels else 2


def _check(found: list[Finding], entry: str, fix: dict[str, Any], path: Path) -> Finding:
    title = entry.split("\n", 1)[0].lstrip("#").strip()
    mine = next((f for f in reversed(found) if f.title == title), None)
    if mine is None:
        raise FindingsWriteError(f"{path}: the new entry does not read back as a finding ('{title}')")
    if mine.outcome != "works":
        raise FindingsWriteError(f"{path}: the new entry reads back as '{mine.outcome}', not 'works'")
    if fix.get("kind") == "flag":
        got = mine.flags.get(fix["name"])
        want = fix.get("after")
        if fix.get("after") in (None, False):
            ok = got is None
        else:
            ok = got is not None and str(got).lower() == str(want).lower()
        if not ok:
            raise FindingsWriteError(
                f"{path}: the new entry's command reads back with {fix['name']}={got!r}, not {want!r}"
            )
    elif fix.get("after") is not None and mine.env.get(fix["name"]) != str(fix.get("after")):
        raise FindingsWriteError(
            f"{path}: the new entry's command does not carry {fix['name']}={fix.get('after')}"
        )
    return mine


def add_finding(run: RecordedRun, path: Path, *, dry_run: bool = False) -> tuple[str, Finding]:
    """Append the run's entry to ``path`` (created if missing, in a folder that exists) and return it with
    the finding the reader makes of it. Raises FindingsWriteError: its folder missing, run not isolated, already recorded there, file not
    UTF-8, the entry would not read back, or the file changed under the write."""
    path = Path(path)
    if not path.parent.is_dir():  # a mistyped folder is never created: say so
        what = "is not a folder" if path.parent.exists() else "does not exist"
        raise FindingsWriteError(f"{path}: its folder {path.parent} {what}; create it or give another --to")
    try:
        old = path.read_bytes() if path.exists() else b""
        before = old.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FindingsWriteError(f"{path}: not UTF-8 text (byte {exc.start}); not appending to it") from None
    except OSError as exc:
        raise FindingsWriteError(f"{path}: cannot read: {exc.strerror}") from None
    if run.run_id and re.search(rf"\bhypoloop run {re.escape(run.run_id)}\b", before):
        raise FindingsWriteError(f"{path}: run {run.run_id} is already recorded there; nothing appended")
    entry = entry_for(run, level=_heading_level(before))
    sep = "" if not before or before.endswith("\n\n") else ("\n" if before.endswith("\n") else "\n\n")
    if len(old) + len((sep + entry).encode("utf-8")) > MAX_FINDINGS_BYTES:  # a case could no longer read it
        raise FindingsWriteError(f"{path}: with this entry the file would be over {MAX_FINDINGS_BYTES >> 20} MiB, "
                                 "the most a case reads as its findings; nothing appended (start another file)")
    fix = (run.conclusion or {})["fix"]
    mine = _check(parse_findings(before + sep + entry, source=str(path)), entry, fix, path)
    if dry_run:
        return entry, mine
    data = (sep + entry).encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise FindingsWriteError(f"{path}: cannot write: {exc.strerror}; nothing appended") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_size != len(old):
            raise FindingsWriteError(
                f"{path}: the file changed while the entry was prepared; nothing appended"
            )
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    after = path.read_bytes()
    if not after.startswith(old):
        raise FindingsWriteError(f"{path}: the file's earlier content changed during the write")
    mine = _check(parse_findings(after.decode("utf-8"), source=str(path)), entry, fix, path)
    return entry, mine
