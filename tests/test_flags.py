"""Flag catalog: parsing argparse --help, argparse-like resolution, value validation, loading + cache."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tools.flags import (
    AmbiguousFlagError,
    CatalogLoadError,
    FlagCatalog,
    FlagError,
    InvalidFlagValueError,
    UnknownFlagError,
    load_flag_catalog,
    parse_help,
)

DATA = Path(__file__).parent / "data"
ATTENTION_BACKENDS = [
    "triton", "torch_native", "flex_attention", "nsa", "cutlass_mla", "fa3", "fa4", "flashinfer", "flashmla",
    "trtllm_mla", "trtllm_mha", "dual_chunk_flash_attn", "aiter", "wave", "intel_amx", "ascend", "intel_xpu",
]  # fmt: skip
NSA_BACKENDS = ["flashmla_sparse", "flashmla_kv", "flashmla_auto", "fa3", "tilelang", "aiter", "trtllm"]


@pytest.fixture(scope="module")
def sglang() -> FlagCatalog:
    """SGLang 0.5.9-style help: one options section, aliases rendered as in Python <= 3.12, few defaults."""
    return parse_help((DATA / "help_sglang_0.5.9.txt").read_text(), source="fixture 0.5.9", version="0.5.9")


@pytest.fixture(scope="module")
def grouped() -> FlagCatalog:
    """Lab-style help: option groups, (default: x) suffixes, Python 3.13 alias layout, wrapped choices."""
    return parse_help((DATA / "help_lab_grouped.txt").read_text(), source="fixture grouped", version="0.5.9")


# --- parsing ------------------------------------------------------------------------------------------


def test_parses_aliases_in_python312_layout(sglang: FlagCatalog) -> None:
    tp = sglang.flags["--tensor-parallel-size"]
    assert tp.aliases == ["--tp-size"]
    assert tp.takes_value and tp.value_type == "int"
    assert sglang.flags["--expert-parallel-size"].aliases == ["--ep-size", "--ep"]
    assert sglang.flags["--model-path"].aliases == ["--model"]
    assert sglang.flags["--help"].aliases == ["-h"]


def test_parses_aliases_in_python313_layout(grouped: FlagCatalog) -> None:
    tp = grouped.flags["--tp-size"]
    assert tp.aliases == ["--tp"]
    assert tp.takes_value and tp.value_type == "int" and tp.default == "1"
    assert grouped.flags["--expert-parallel-size"].aliases == ["--ep-size", "--ep"]


def test_parses_metavar_repeated_per_alias() -> None:
    text = textwrap.dedent(
        """\
        usage: launch_server.py [-h] [--tp-size TP_SIZE]

        options:
          -h, --help            show this help message and exit
          --tp-size TP_SIZE, --tp TP_SIZE
                                The tensor parallelism size.
        """
    )
    spec = parse_help(text).resolve("--tp")
    assert (spec.name, spec.aliases, spec.value_type, spec.metavar) == (
        "--tp-size",
        ["--tp"],
        "int",
        "TP_SIZE",
    )


def test_reads_choices_on_one_line(sglang: FlagCatalog) -> None:
    assert sglang.flags["--attention-backend"].choices == ATTENTION_BACKENDS
    assert sglang.flags["--nsa-prefill-backend"].choices == NSA_BACKENDS
    assert sglang.flags["--nsa-decode-backend"].choices == NSA_BACKENDS
    assert sglang.flags["--kv-cache-dtype"].choices == [
        "auto",
        "fp8_e5m2",
        "fp8_e4m3",
        "bf16",
        "bfloat16",
        "fp4_e2m1",
    ]
    assert "modelopt_fp4" in (sglang.flags["--quantization"].choices or [])


def test_reads_choices_wrapped_over_lines(grouped: FlagCatalog) -> None:
    assert grouped.flags["--attention-backend"].choices == ATTENTION_BACKENDS
    assert grouped.flags["--decode-attention-backend"].choices == ATTENTION_BACKENDS
    assert grouped.flags["--nsa-decode-backend"].choices == NSA_BACKENDS
    assert grouped.flags["--fp8-gemm-backend"].choices == [
        "auto", "deep_gemm", "flashinfer_trtllm", "flashinfer_deepgemm", "cutlass", "triton", "aiter",
    ]  # fmt: skip
    # The help after a wrapped choice list is still the flag's help, not more choices.
    assert grouped.flags["--attention-backend"].help.startswith("Choose the kernels for attention layers.")


def test_reads_defaults_from_argparse_suffix(grouped: FlagCatalog) -> None:
    assert grouped.flags["--kv-cache-dtype"].default == "auto"
    assert grouped.flags["--port"].default == "30000"
    assert grouped.flags["--host"].default == "127.0.0.1"
    assert grouped.flags["--model-path"].default is None  # "(default: None)"
    assert grouped.flags["--json-model-override-args"].default == "{}"
    # "(default:" and the value are on different lines in the fixture.
    assert grouped.flags["--fp4-gemm-backend"].default == "flashinfer_cutlass"


def test_reads_defaults_from_help_prose(sglang: FlagCatalog) -> None:
    assert sglang.flags["--fp8-gemm-backend"].default == "auto"  # "'auto' (default, auto-selects ...)"
    assert (
        sglang.flags["--fp4-gemm-backend"].default == "flashinfer_cutlass"
    )  # "'flashinfer_cutlass' (default)"
    assert sglang.flags["--context-length"].default is None  # "Defaults to None (will use ...)"
    assert sglang.flags["--nccl-port"].default is None  # "Defaults to a random port." is not a value
    assert sglang.flags["--kv-cache-dtype"].default is None  # SGLang does not print it


def test_store_true_flags_are_switches(sglang: FlagCatalog, grouped: FlagCatalog) -> None:
    for catalog in (sglang, grouped):
        for name in ("--disable-cuda-graph", "--trust-remote-code", "--disable-shared-experts-fusion"):
            spec = catalog.flags[name]
            assert (spec.takes_value, spec.value_type, spec.choices) == (False, "bool", None)


def test_infers_value_types(sglang: FlagCatalog, grouped: FlagCatalog) -> None:
    for catalog in (sglang, grouped):
        types = {name: spec.value_type for name, spec in catalog.flags.items()}
        assert types["--mem-fraction-static"] == "float"  # metavar MEM_FRACTION_STATIC
        assert types["--watchdog-timeout"] == "float"  # TIMEOUT wins over an int-looking default 300
        assert types["--port"] == "int"
        assert types["--cuda-graph-max-bs"] == "int"
        assert types["--max-lora-chunk-size"] == "int"  # choices {16,32,64,128}
        assert types["--model-path"] == "str"
        assert types["--log-level"] == "str"
        assert types["--json-model-override-args"] == "str"


def test_help_text_joins_wrapped_lines(sglang: FlagCatalog) -> None:
    assert sglang.flags["--mem-fraction-static"].help == (
        "The fraction of the memory used for static allocation (model weights and KV cache memory pool). "
        "Use a smaller value if you see out-of-memory errors."
    )
    assert "(optimal for Blackwell and low-latency)" in sglang.flags["--fp8-gemm-backend"].help
    assert sglang.flags["--trust-remote-code"].help.startswith("Whether or not to allow")  # same-line layout


def test_detects_deprecated_flags_but_not_deprecated_env_vars(
    sglang: FlagCatalog, grouped: FlagCatalog
) -> None:
    assert sglang.flags["--hybrid-kvcache-ratio"].deprecated  # "Note: ... is deprecated now."
    assert grouped.flags[
        "--nsa-decode-backend"
    ].deprecated  # "[Deprecated] Use --dsa-decode-backend instead."
    assert not grouped.flags["--dsa-decode-backend"].deprecated
    assert not sglang.flags["--nsa-decode-backend"].deprecated
    # "NOTE: This replaces the deprecated environment variables ..." is about env vars, not the flag.
    assert not sglang.flags["--fp8-gemm-backend"].deprecated


def test_reads_nargs_from_metavar_shape(sglang: FlagCatalog) -> None:
    assert sglang.flags["--cuda-graph-bs"].nargs == "+"
    assert sglang.flags["--cuda-graph-bs"].value_type == "int"
    assert sglang.flags["--tensor-parallel-size"].nargs is None


def test_tolerates_colour_noise_and_positionals() -> None:
    text = (
        "WARNING: something imported slowly\n"
        "\x1b[1;34musage:\x1b[0m prog [-h] [--quick-flag] [--level {a,b}] model\n\n"
        "positional arguments:\n"
        "  model                 the model\n\n"
        "\x1b[1;34moptions:\x1b[0m\n"
        "  -h, --help            show this help message and exit\n"
        "  \x1b[1;36m--quick-flag\x1b[0m          be quick\n"
        "  --level {a,b}         how much (default: b)\n"
    )
    catalog = parse_help(text)
    assert set(catalog.flags) == {"--help", "--quick-flag", "--level"}
    assert catalog.flags["--level"].choices == ["a", "b"]
    assert catalog.flags["--level"].default == "b"


def test_nothing_parsable_gives_empty_catalog() -> None:
    assert (
        parse_help(
            "Traceback (most recent call last):\nModuleNotFoundError: No module named 'sglang'\n"
        ).flags
        == {}
    )


# --- resolution ---------------------------------------------------------------------------------------


def test_resolves_exact_alias_and_unique_prefix(sglang: FlagCatalog) -> None:
    assert sglang.resolve("--kv-cache-dtype").name == "--kv-cache-dtype"
    assert sglang.resolve("--tp-size").name == "--tensor-parallel-size"
    assert sglang.resolve("--ep").name == "--expert-parallel-size"
    assert sglang.resolve("--mem-frac").name == "--mem-fraction-static"
    assert sglang.resolve("--disable-shared").name == "--disable-shared-experts-fusion"
    # A prefix of two spellings of one flag is that flag.
    assert sglang.resolve("--tp-s").name == "--tensor-parallel-size"


def test_exact_name_wins_over_longer_flags_it_prefixes() -> None:
    catalog = parse_help(
        "options:\n"
        "  --disable-cuda-graph  Disable cuda graph.\n"
        "  --disable-cuda-graph-padding\n"
        "                        Disable cuda graph when padding is needed.\n"
    )
    assert catalog.resolve("--disable-cuda-graph").name == "--disable-cuda-graph"
    with pytest.raises(AmbiguousFlagError):
        catalog.resolve("--disable-cuda")


def test_resolves_bare_config_key_names(sglang: FlagCatalog) -> None:
    assert sglang.resolve("kv_cache_dtype").name == "--kv-cache-dtype"
    assert sglang.resolve("tp-size").name == "--tensor-parallel-size"


def test_ambiguous_prefix_raises(sglang: FlagCatalog) -> None:
    with pytest.raises(AmbiguousFlagError) as err:
        sglang.resolve("--nsa")
    message = str(err.value)
    assert message.startswith("--nsa: ambiguous")
    assert "--nsa-decode-backend" in message and "--nsa-prefill-backend" in message
    assert err.value.flag == "--nsa"
    assert not sglang.has("--dis")


def test_unknown_flag_raises_with_suggestion(sglang: FlagCatalog) -> None:
    with pytest.raises(UnknownFlagError) as err:
        sglang.resolve("--kv-cache-dtyp3")
    assert "--kv-cache-dtyp3: unknown flag" in str(err.value)
    assert "did you mean --kv-cache-dtype?" in str(err.value)
    assert not sglang.has("--no-such-flag")
    with pytest.raises(UnknownFlagError, match="separately"):
        sglang.resolve("--tp-size=8")


def test_a_catalog_answers_the_same_when_asked_again_and_its_lookups_stay_out_of_equality_and_dumps() -> None:
    text = (DATA / "help_sglang_0.5.9.txt").read_text()
    used, fresh = parse_help(text, source="s", version="0.5.9"), parse_help(text, source="s", version="0.5.9")
    for _ in range(2):  # the second answers come from what the first built
        assert used.resolve("--tp-size").name == "--tensor-parallel-size"
        assert used.canonical_name("--tp-size") == "--tensor-parallel-size" and used.canonical_name("--nsa") is None
        with pytest.raises(UnknownFlagError, match="did you mean --kv-cache-dtype") as err:
            used.resolve("--kv-cache-dtyp3")
        assert err.value.flag == "--kv-cache-dtyp3"
    assert used.feature_switch("--hicache-ratio") == fresh.feature_switch("--hicache-ratio")
    assert used == fresh and used.model_dump() == fresh.model_dump()
    assert used.model_dump_json() == fresh.model_dump_json()
    # a copy given other flags answers from its own flags, not from what the original built
    fewer = used.model_copy(update={"flags": {k: v for k, v in used.flags.items() if k != "--tensor-parallel-size"}})
    assert not fewer.has("--tp-size") and used.has("--tp-size")


# --- validation ---------------------------------------------------------------------------------------


def test_rejects_value_outside_choices(sglang: FlagCatalog) -> None:
    with pytest.raises(InvalidFlagValueError) as err:
        sglang.validate("--kv-cache-dtype", "fp9")
    assert (
        str(err.value)
        == "--kv-cache-dtype: 'fp9' is not one of auto, fp8_e5m2, fp8_e4m3, bf16, bfloat16, fp4_e2m1"
    )
    assert sglang.validate("--kv", "bf16") == ("--kv-cache-dtype", "bf16")
    assert sglang.validate("--nsa-decode-backend", "tilelang") == ("--nsa-decode-backend", "tilelang")
    with pytest.raises(InvalidFlagValueError, match="is not one of"):
        sglang.validate("--attention-backend", "FlashInfer")  # argparse choices are case-sensitive


@pytest.mark.parametrize(
    "value",
    [
        "x; rm -rf ~",
        "a|b",
        "$(id)",
        "`id`",
        "a&&b",
        "a>b",
        "a<b",
        "(x)",
        "line\nbreak",
        "it's",
        'say "hi"',
        "back\\slash",
        "two words",
        "tab\there",
        "nul\x00",
        "/models/*",
    ],
)
def test_refuses_shell_metacharacters_and_whitespace(sglang: FlagCatalog, value: str) -> None:
    with pytest.raises(InvalidFlagValueError) as err:
        sglang.validate("--model-path", value)
    message = str(err.value)
    assert message.startswith("--model-path: ")
    assert "\n" not in message
    assert "refused" in message


def test_a_flag_that_takes_json_accepts_a_json_object_kept_as_spelled(sglang: FlagCatalog) -> None:
    """SGLang's help: "A dictionary in JSON string format used to override default model configurations"."""
    value = '{"index_topk_pattern": "FFSS", "rope_scaling": {"factor": 4.0}}'
    assert sglang.validate("--json-model-override-args", value) == ("--json-model-override-args", value)
    assert sglang.validate("--json-model-override-args", "[1, 2]")[1] == "[1, 2]"
    assert sglang.validate("--json-model-override-args", '{"a":1}')[1] == '{"a": 1}'  # one spelling
    for bad in ("{not json", '"a string"', '{"a": 1}; rm -rf ~', '{"a":\n1}', "12", "x"):
        with pytest.raises(InvalidFlagValueError, match="not a one-line JSON object or array"):
            sglang.validate("--json-model-override-args", bad)
    with pytest.raises(InvalidFlagValueError, match="refused"):  # other flags still take plain words only
        sglang.validate("--model-path", '{"a": 1}')


def test_a_help_that_names_a_json_file_or_choice_does_not_make_its_flag_take_json() -> None:
    """A help that says where a default is read from ("the tokenizer's vocab.json") or that offers ``json``
    as one of its choices does not make the flag a JSON-taking one: its plain values are accepted as the
    launcher would accept them, and a flag whose help says it takes JSON still takes only JSON."""
    help_text = textwrap.dedent("""\
        usage: serve.py [-h] [--vocab-source VOCAB_SOURCE] [--trace-format {plain,json}] [--extra EXTRA]

        options:
          -h, --help            show this help message and exit
          --vocab-source VOCAB_SOURCE
                                Where the vocabulary comes from; by default the
                                tokenizer's vocab.json.
          --trace-format {plain,json}
                                How traces are written: 'plain' or 'json' (one
                                object per line).
          --extra EXTRA         Extra settings as a JSON string.
        """)
    flags = parse_help(help_text, source="made-up help")
    assert flags.validate("--vocab-source", "hub") == ("--vocab-source", "hub")
    assert flags.validate("--trace-format", "plain") == ("--trace-format", "plain")
    assert flags.validate("--trace-format", "json") == ("--trace-format", "json")
    with pytest.raises(InvalidFlagValueError, match="is not one of plain, json"):
        flags.validate("--trace-format", "yaml")
    assert flags.validate("--extra", '{"a":1}') == ("--extra", '{"a": 1}')
    with pytest.raises(InvalidFlagValueError, match="not a one-line JSON object or array"):
        flags.validate("--extra", "hub")


def test_parses_and_normalises_numbers(sglang: FlagCatalog) -> None:
    assert sglang.validate("--tp", 8) == ("--tensor-parallel-size", "8")
    assert sglang.validate("--tp", "08") == ("--tensor-parallel-size", "8")
    assert sglang.validate("--tp", 8.0) == ("--tensor-parallel-size", "8")
    assert sglang.validate("--chunked-prefill-size", "-1") == ("--chunked-prefill-size", "-1")
    assert sglang.validate("--mem-fraction-static", 0.85) == ("--mem-fraction-static", "0.85")
    assert sglang.validate("--mem-fraction-static", "0.80") == ("--mem-fraction-static", "0.80")
    assert sglang.validate("--max-lora-chunk-size", 32) == ("--max-lora-chunk-size", "32")
    with pytest.raises(InvalidFlagValueError, match=r"^--tensor-parallel-size: 'eight' is not an integer$"):
        sglang.validate("--tp", "eight")
    with pytest.raises(InvalidFlagValueError, match="is not a number"):
        sglang.validate("--mem-fraction-static", "most")
    with pytest.raises(InvalidFlagValueError, match="finite"):
        sglang.validate("--mem-fraction-static", "nan")
    with pytest.raises(InvalidFlagValueError, match="is not one of 16, 32, 64, 128"):
        sglang.validate("--max-lora-chunk-size", 48)


def test_switches_accept_true_only(sglang: FlagCatalog) -> None:
    assert sglang.validate("--disable-cuda-graph", True) == ("--disable-cuda-graph", True)
    assert sglang.validate("--trust-remote-code", "true") == ("--trust-remote-code", True)
    for bad in (False, None, "yes", 1):
        with pytest.raises(InvalidFlagValueError, match=r"^--disable-cuda-graph: is a switch"):
            sglang.validate("--disable-cuda-graph", bad)


def test_value_flags_need_a_plain_value(sglang: FlagCatalog) -> None:
    for bad in (None, True, False):
        with pytest.raises(InvalidFlagValueError, match=r"^--kv-cache-dtype: expects a value \(one of auto"):
            sglang.validate("--kv-cache-dtype", bad)
    # a value flag written as a switch (`"--tp-size" = true`) is told so, not "got no value"
    with pytest.raises(InvalidFlagValueError, match=r"got true \(a switch's form: no value\)$"):
        sglang.validate("--tp-size", True)
    with pytest.raises(InvalidFlagValueError, match="got no value$"):
        sglang.validate("--tp-size", None)
    with pytest.raises(InvalidFlagValueError, match="empty value"):
        sglang.validate("--model-path", "")
    with pytest.raises(InvalidFlagValueError, match="would be read as another option"):
        sglang.validate("--model-path", "--trust-remote-code")


def test_validate_propagates_resolution_errors(sglang: FlagCatalog) -> None:
    with pytest.raises(UnknownFlagError):
        sglang.validate("--no-such-flag", "1")
    with pytest.raises(AmbiguousFlagError):
        sglang.validate("--nsa", "tilelang")
    assert issubclass(InvalidFlagValueError, FlagError) and issubclass(FlagError, ValueError)


def test_normalize_maps_to_canonical_names(grouped: FlagCatalog) -> None:
    flags = {
        "--tp": 8,
        "--trust-remote-code": True,
        "--disable-cuda-graph": False,
        "--quantization": "modelopt_fp4",
    }
    assert grouped.normalize(flags) == {
        "--tp-size": "8",
        "--trust-remote-code": True,
        "--quantization": "modelopt_fp4",
    }
    with pytest.raises(InvalidFlagValueError, match="given twice"):
        grouped.normalize({"--tp": 8, "--tp-size": 4})


# --- serialisation ------------------------------------------------------------------------------------


def test_catalog_round_trips_through_json(grouped: FlagCatalog) -> None:
    grouped.resolve("--tp")  # using a catalog must not change what it compares equal to
    again = FlagCatalog.model_validate(json.loads(json.dumps(grouped.model_dump())))
    assert again == grouped
    assert FlagCatalog.model_validate_json(grouped.model_dump_json()) == grouped
    assert again.validate("--tp", 2) == ("--tp-size", "2")
    assert again.version == "0.5.9" and again.source == "fixture grouped"


# --- load_flag_catalog against a real process ------------------------------------------------------------


@dataclass
class _Result:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    duration_s: float = 0.0


@dataclass
class _SubprocessHost:
    """Just enough of tools.host.Host: runs argv as a real local process."""

    name: str = "fake-local"
    calls: list[list[str]] = field(default_factory=list)

    def run(self, argv: Sequence[str], *, timeout: float = 60.0) -> _Result:
        self.calls.append(list(argv))
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, start_new_session=True
        )
        return _Result(list(argv), proc.returncode, proc.stdout, proc.stderr)


HELP_SCRIPT = """\
import argparse
parser = argparse.ArgumentParser(prog="launch_server")
parser.add_argument("--model-path", "--model", required=True)
parser.add_argument("--tp-size", "--tp", type=int, default=1, help="The tensor parallelism size.")
parser.add_argument("--kv-cache-dtype", choices=["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16"], default="auto")
parser.add_argument("--disable-cuda-graph", action="store_true", help="Disable cuda graph.")
parser.parse_args()
"""


def _script(tmp_path: Path, name: str, body: str) -> list[str]:
    path = tmp_path / name
    path.write_text(body)
    return [sys.executable, str(path)]


def test_load_catalog_runs_help_on_host_and_uses_cache_second_time(tmp_path: Path) -> None:
    host = _SubprocessHost()
    launcher = _script(tmp_path, "launch_server.py", HELP_SCRIPT)
    cache = tmp_path / "cache"

    first = load_flag_catalog(host, launcher, cache_dir=cache, version="0.5.9")
    assert host.calls == [[*launcher, "--help"]]
    assert first.resolve("--tp").name == "--tp-size"
    assert first.flags["--kv-cache-dtype"].choices == ["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16"]
    assert first.version == "0.5.9" and "fake-local" in first.source
    assert len(list(cache.glob("*.json"))) == 1

    second = load_flag_catalog(host, launcher, cache_dir=cache, version="0.5.9")
    assert len(host.calls) == 1  # served from the cache
    assert second == first

    load_flag_catalog(host, launcher, cache_dir=cache, version="0.5.10")  # another version: another key
    assert len(host.calls) == 2
    load_flag_catalog(_SubprocessHost(name="other-host"), launcher, cache_dir=cache, version="0.5.9")
    assert len(list(cache.glob("*.json"))) == 3


def test_load_catalog_without_version_does_not_cache(tmp_path: Path) -> None:
    host = _SubprocessHost()
    launcher = _script(tmp_path, "launch_server.py", HELP_SCRIPT)
    load_flag_catalog(host, launcher, cache_dir=tmp_path / "cache", version=None)
    load_flag_catalog(host, launcher, cache_dir=tmp_path / "cache", version=None)
    assert len(host.calls) == 2
    assert not (tmp_path / "cache").exists()


def test_load_catalog_ignores_corrupt_cache(tmp_path: Path) -> None:
    host = _SubprocessHost()
    launcher = _script(tmp_path, "launch_server.py", HELP_SCRIPT)
    cache = tmp_path / "cache"
    load_flag_catalog(host, launcher, cache_dir=cache, version="0.5.9")
    (cache_file,) = cache.glob("*.json")
    cache_file.write_text("{not json")
    catalog = load_flag_catalog(host, launcher, cache_dir=cache, version="0.5.9")
    assert len(host.calls) == 2 and catalog.has("--tp")
    assert json.loads(cache_file.read_text())["catalog"]["flags"]["--tp-size"]["aliases"] == ["--tp"]


def test_load_catalog_reports_failing_launcher_in_one_line(tmp_path: Path) -> None:
    launcher = _script(
        tmp_path,
        "broken.py",
        "import sys\nsys.stderr.write('Traceback (most recent call last):\\n"
        "ModuleNotFoundError: No module named sglang\\n')\nsys.exit(1)\n",
    )
    with pytest.raises(CatalogLoadError) as err:
        load_flag_catalog(_SubprocessHost(), launcher, cache_dir=tmp_path / "cache", version="0.5.9")
    message = str(err.value)
    assert "\n" not in message
    assert "fake-local" in message and "exited with 1" in message
    assert "No module named sglang" in message
    assert not (tmp_path / "cache").exists()


def test_load_catalog_reports_output_without_options(tmp_path: Path) -> None:
    launcher = _script(tmp_path, "chatty.py", "print('hello, I am not argparse')\n")
    with pytest.raises(CatalogLoadError, match="printed no argparse options"):
        load_flag_catalog(_SubprocessHost(), launcher, cache_dir=tmp_path / "cache", version="0.5.9")


# ---------------------------------------------------------------- the real --help of two releases


def _real(version: str) -> FlagCatalog:
    name = "help_sglang_0.5.23.txt" if version == "0.5.23" else "help_sglang_0.5.9_full.txt"
    return parse_help((DATA / name).read_text(), source=name, version=version)


def test_real_0_5_9_and_0_5_23_help_parse_with_renamed_and_split_flags() -> None:
    old, new = _real("0.5.9"), _real("0.5.23")
    assert len(old.flags) > 300 and len(new.flags) > 500
    # 0.5.9: one CUDA-graph max batch size, NSA backends, NaN detection
    assert old.resolve("--cuda-graph-max-bs").takes_value and old.resolve("--cuda-graph-max-bs").value_type == "int"
    assert old.has("--nsa-decode-backend") and old.has("--enable-nan-detection")
    # 0.5.23: the max batch size is split per phase, so the old name is an ambiguous prefix
    with pytest.raises(AmbiguousFlagError):
        new.resolve("--cuda-graph-max-bs")
    assert new.resolve("--cuda-graph-max-bs-decode").value_type == "int"
    assert not new.has("--nsa-decode-backend") and "flashmla_sparse" in (new.resolve("--dsa-decode-backend").choices or [])
    assert not new.has("--enable-nan-detection")
    assert new.resolve("--disable-cuda-graph").deprecated and not new.resolve("--disable-decode-cuda-graph").deprecated
    assert new.validate("--cuda-graph-max-bs-decode", 64) == ("--cuda-graph-max-bs-decode", "64")


def test_boolean_optional_pairs_are_two_switches_not_aliases() -> None:
    new = _real("0.5.23")
    on, off = new.resolve("--enable-tf32-matmul"), new.resolve("--no-enable-tf32-matmul")
    assert on.name == "--enable-tf32-matmul" and off.name == "--no-enable-tf32-matmul"
    assert on.negation == off.name and off.negates == on.name
    assert off.name not in on.aliases and not on.takes_value and not off.takes_value


def test_numeric_choices_take_numbers() -> None:
    new = _real("0.5.23")
    assert new.resolve("--max-lora-chunk-size").choices == ["16", "32", "64", "128"]
    assert new.validate("--max-lora-chunk-size", 64)[1] == "64"
    with pytest.raises(InvalidFlagValueError):
        new.validate("--max-lora-chunk-size", 48)


@pytest.mark.parametrize(
    ("name", "present", "absent"),
    [
        ("help_sglang_0.5.9_full.txt", "--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"),
        ("help_sglang_0.5.23.txt", "--cuda-graph-max-bs-decode", "--nsa-decode-backend"),
    ],
)
def test_hypoloop_flags_reads_each_releases_real_help(tmp_path: Path, name: str, present: str, absent: str) -> None:
    from clirun import run_cli

    r = run_cli(tmp_path, "flags", "--from-file", str(DATA / name), "--json")
    assert r.returncode == 0, r.stderr
    flags = json.loads(r.stdout)["flags"]
    assert present in flags and absent not in flags


@pytest.mark.parametrize("columns", ["60", "80", "130"])
def test_hypoloop_flags_cuts_no_name_or_choice(tmp_path: Path, columns: str) -> None:
    """`hypoloop flags` on a narrow or wide terminal: every flag name and alias whole on its line, every
    choice and default shown (wrapped, perhaps), nothing ends in '…' (a 5-column table at 80 columns
    showed --tokenizer-p…)."""
    import re

    from clirun import run_cli

    help_file = str(DATA / "help_sglang_0.5.23.txt")
    flags = json.loads(run_cli(tmp_path, "flags", "--from-file", help_file, "--json").stdout)["flags"]
    r = run_cli(tmp_path, "flags", "--from-file", help_file, COLUMNS=columns)
    assert r.returncode == 0, r.stderr
    assert "…" not in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= int(columns)
    words = set(re.sub(r"[│┃╭╮╰╯─━┏┓┗┛┡┩╇┳┻,]", " ", r.stdout).split())
    squashed = re.sub(r"[\s│┃─━,]+", "", r.stdout)
    for name, spec in flags.items():
        for n in [name, *spec["aliases"]]:  # one wider than the terminal can only be folded
            assert n in words if len(n) < int(columns) - 4 else n in squashed, n
        for value in [*(spec["choices"] or []), spec["default"] or ""]:
            assert re.sub(r"[\s,]+", "", value) in squashed, (name, value)


def test_a_flag_knows_the_switch_of_the_feature_it_configures() -> None:
    """Read off the real SGLang 0.5.23 help: the hierarchical cache's settings belong to
    --enable-hierarchical-cache (alias --enable-hicache), PD disaggregation's to --disaggregation-mode
    (off as 'null'); switches and plain settings have none."""
    real = parse_help((DATA / "help_sglang_0.5.23.txt").read_text(), source="real 0.5.23", version="0.5.23")
    switch = real.feature_switch
    assert (s := switch("--hicache-io-backend")) is not None and s.name == "--enable-hierarchical-cache"
    assert (s := switch("--hicache-mem-layout")) is not None and s.name == "--enable-hierarchical-cache"
    assert (s := switch("--disaggregation-decode-allocation-policy")) is not None
    assert s.name == "--disaggregation-mode"
    for name in ("--enable-hierarchical-cache", "--mem-fraction-static", "--attention-backend",
                 "--disaggregation-mode", "--kv-cache-dtype"):
        assert switch(name) is None, name
