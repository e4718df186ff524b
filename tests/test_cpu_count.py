"""The host's CPU count is asked of the host by the case's ``launcher.cpu_query_argv`` (POSIX ``getconf
_NPROCESSORS_ONLN`` by default): a lab world answers with its own machine's count (``[hardware] cpu_count``,
``python -m lab.cpu_query``), so the run shows and sizes CPU lists for the world's Xeon, not this machine."""

from __future__ import annotations

from pathlib import Path

from clirun import LAB_LAUNCHER, run_cli, transcript_events

WORLD = Path(__file__).parent / "data" / "worlds" / "cpu-ranks-above-numa-nodes" / "world.toml"


def _case(tmp_path: Path, cpu_count: int | None) -> Path:
    text = WORLD.read_text()
    if cpu_count is not None:
        text = text.replace('vendor = "cpu"\n', f'vendor = "cpu"\ncpu_count = {cpu_count}\n', 1)
    world = tmp_path / "world.toml"
    world.write_text(text)
    launcher = LAB_LAUNCHER + 'cpu_query_argv = ["{python}", "-m", "lab.cpu_query"]\n'
    case = tmp_path / "case.toml"
    case.write_text(
        f'name = "cpu-count"\ndescription = "the server stops at start-up"\n[host]\nenv = {{ HYPOLOOP_LAB_WORLD = "{world}" }}\n'
        f'{launcher}[model]\npath = "meituan/DeepSeek-R1-Channel-INT8"\n[baseline]\n'
        'flags = { "--device" = "cpu", "--tp-size" = 8, "--quantization" = "w8a8_int8" }\n[budget]\nexperiments = 1\n'
    )
    return case


def _fingerprint_cpus(tmp_path: Path, case: Path) -> tuple[int | None, str]:
    r = run_cli(tmp_path, "run", str(case), "--auto", "--transcript-dir", "tr")
    assert r.returncode == 0, r.stderr[-2000:]
    events = transcript_events(next((tmp_path / "tr").glob("*.jsonl")))
    fp = next(e["data"] for e in events if e["type"] == "host.fingerprint")
    return (fp.get("fingerprint") or fp).get("cpu_count"), r.stdout


def test_the_run_reads_the_worlds_cpu_count_through_the_cases_query(tmp_path: Path) -> None:
    count, out = _fingerprint_cpus(tmp_path, _case(tmp_path, 224))
    assert count == 224
    assert "224 CPUs" in out

