"""gradian.options: every option's default, help and check in one dataclass field; the CLI derived from them;
report.json saves them and verify / report read them back."""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest
import typer
from typer.testing import CliRunner

from gradian.errors import GradianError
from gradian.options import (
    DEFAULTS,
    AttributeOptions,
    CallbackOptions,
    DiagnoseOptions,
    OptionError,
    RunInputs,
    TrainOptions,
    VerdictOptions,
    VerifyOptions,
    report_options,
)
from gradian.options.cli import cli_fields, decls_of, given

ALL = (AttributeOptions, DiagnoseOptions, TrainOptions, VerifyOptions, VerdictOptions, RunInputs)


def _app() -> typer.Typer:
    from gradian.commands import register

    app = typer.Typer()
    register(app)
    return app


def _commands() -> dict[str, typer.models.CommandInfo]:
    return {c.name: c for c in _app().registered_commands}


@pytest.mark.parametrize("cls", ALL)
def test_every_field_has_help_and_the_defaults_are_valid(cls):
    for f in dataclasses.fields(cls):
        assert str(f.metadata.get("help") or "").strip(), f"{cls.__name__}.{f.name} has no help"
        assert f.default is not dataclasses.MISSING, f"{cls.__name__}.{f.name} has no default"
    d = cls().to_dict()
    assert json.loads(json.dumps(d)) == d  # JSON as it is
    assert cls.from_dict(d) == cls() == cls.from_dict(None) == cls.from_dict({**d, "from_a_newer_version": 1})


@pytest.mark.parametrize(
    ("command", "groups"),
    [
        ("attribute", (RunInputs, AttributeOptions, VerdictOptions)),
        ("report", (given(VerdictOptions),)),
        ("diagnose", (RunInputs, DiagnoseOptions)),
        ("verify", (VerifyOptions,)),
        ("train", (given(TrainOptions),)),
    ],
)
def test_cli_options_are_derived_from_the_dataclasses(command, groups):
    """Every command-line field is a Typer option with the field's flag, help and default (each written once)."""
    cmd = typer.main.get_command(_app()).commands[command]
    params = {p.name: p for p in cmd.params}
    for g in groups:
        partial = isinstance(g, given)
        cls = g.cls if partial else g
        for f in cli_fields(cls):
            p = params[f.name]
            assert decls_of(f)[0].split("/")[0] in p.opts, (f.name, p.opts)
            assert str(f.metadata["help"]) in p.help
            if partial:  # a config file sits between the defaults and the flags: the default is shown, not set
                assert p.default is None
                shown = (
                    "none" if f.default is None else str(f.default).lower() if f.default in (True, False) else f.default
                )
                assert f"(default: {shown})" in p.help, p.help
            else:
                want = None if isinstance(f.default, tuple) else f.default
                assert p.default == want, (f.name, p.default, want)
    runner = CliRunner()
    res = runner.invoke(_app(), [command, "--help"], env={"COLUMNS": "250", "TERMINAL_WIDTH": "250"})
    assert res.exit_code == 0, res.output
    for g in groups:
        cls = g.cls if isinstance(g, given) else g
        for f in cli_fields(cls):
            assert decls_of(f)[0].split("/")[0] in res.output, (command, f.name)


def test_no_command_types_an_option_default():
    """The option fields are not spelled again in a command's signature."""
    import inspect

    from gradian import attribute_command, train, verify
    from gradian.diagnose import cli as diagnose_cli

    for fn, cls in ((attribute_command.attribute_command, AttributeOptions), (verify.verify_command, VerifyOptions),
                    (train.train_command, TrainOptions), (diagnose_cli.diagnose_command, DiagnoseOptions)):  # fmt: skip
        src = inspect.getsource(fn.undecorated)
        assert "def " + fn.__name__ in src
        for f in cli_fields(cls):
            assert f'"{decls_of(f)[0].split("/")[0]}"' not in src, (fn.__name__, f.name)


@pytest.mark.parametrize(
    ("make", "line"),
    [
        (lambda: AttributeOptions(method="tracin"), "unknown --method 'tracin'. Fix: use one of ekfac, kfac, datainf"),
        (lambda: AttributeOptions(store_dtype="fp16"), "unknown --store-dtype 'fp16'. Fix: use auto, fp32 or bf16."),
        (
            lambda: AttributeOptions(eval_samples=-1),
            "--eval-samples -1 is below 0. Fix: pass --eval-samples 0 or more.",
        ),
        (
            lambda: AttributeOptions(fisher="true", method="exact"),
            "--fisher true is for the Kronecker-factored methods",
        ),
        (
            lambda: AttributeOptions(fisher="true", method="cosine"),
            "--fisher true is for the Kronecker-factored methods; --method cosine uses no curvature",
        ),
        (lambda: AttributeOptions(eval_cut_rise=-0.5), "--eval-cut-rise -0.5 is below 0. Fix: pass --eval-cut-rise 0"),
        (lambda: AttributeOptions(batch_size=0), "--batch-size 0 is below 1. Fix: pass --batch-size 1 or more."),
        (lambda: DiagnoseOptions(format="yaml"), "unknown --format 'yaml'. Fix: use text, json or markdown."),
        (lambda: DiagnoseOptions(fail_on="Loud"), "unknown --fail-on 'loud'. Fix: use one of error, warning, info"),
        (lambda: TrainOptions(save_steps=0), "save_steps: save_steps must be >= 1. Fix: omit it or set e.g. 50."),
        (lambda: TrainOptions(epochs=0), "nothing to train: epochs <= 0 and no max_steps. Fix: set epochs > 0."),
        (lambda: VerifyOptions(k=0), "--k 0 is below 1. Fix: pass --k 1 or more."),
        (lambda: AttributeOptions(top="ten"), "--top 'ten' is not a number. Fix: pass --top 0 or more."),
        (lambda: AttributeOptions().replace(methd="kfac"), "unknown attribute option 'methd'. Fix: use one of"),
        # GradianCallback's options are Python keyword arguments, named as the user wrote them
        (lambda: CallbackOptions(covariance_rows=0), "covariance_rows=0 is below 1. Fix: pass covariance_rows=1 or"),
        (lambda: CallbackOptions(store_dtype="fp16"), "unknown store_dtype='fp16'. Fix: use fp32 or bf16."),
    ],
)
def test_a_bad_value_is_one_line_naming_the_option_and_the_fix(make, line):
    with pytest.raises(OptionError) as e:
        make()
    assert isinstance(e.value, ValueError) and isinstance(e.value, GradianError)
    assert e.value.one_line().startswith(line), e.value.one_line()
    assert "\n" not in e.value.one_line()


def test_diagnose_lists_split_on_commas():
    o = DiagnoseOptions(select=("D1,D2", " D3 "), ignore=["C219"], fail_on="WARNING")
    assert o.select == ("D1", "D2", "D3") and o.ignore == ("C219",) and o.fail_on == "warning"
    assert DiagnoseOptions(select=()).select is None  # nothing selected: the settings' selection applies


def test_the_option_defaults_are_the_ones_the_code_uses():
    """The modules that still name a default read it from gradian.options (or agree with it, checked here)."""
    from gradian.attribute import generate, tokens
    from gradian.attribute.fisher import FISHERS
    from gradian.attribute.regression import DEFAULT_MIN_DELTA
    from gradian.attribute.scores import METHODS
    from gradian.data.types import FormatSettings
    from gradian.options.attribute import FISHERS as OPT_FISHERS
    from gradian.options.attribute import METHODS as OPT_METHODS
    from gradian.train import TrainConfig

    assert DEFAULT_MIN_DELTA == DEFAULTS.threshold
    assert tuple(METHODS) == OPT_METHODS and tuple(FISHERS) == OPT_FISHERS
    assert generate.MAX_NEW_TOKENS == DEFAULTS.max_new_tokens and tokens.TOKEN_HARM_ROWS == DEFAULTS.token_harm
    assert generate.CUT_RISE == DEFAULTS.eval_cut_rise == 0.1  # the cut's rise, unchanged since it was a constant
    assert inspect.signature(generate.complete_prompts).parameters["cut_rise"].default == DEFAULTS.eval_cut_rise
    assert FormatSettings().max_length == TrainOptions().max_length
    assert TrainConfig is TrainOptions


def test_the_method_registry_and_the_option_list_agree():
    """The options name the methods without importing torch; gradian.attribute.methods registers one object per
    name, in the same order, and the Kronecker-factored ones are the options' FACTOR_METHODS."""
    import subprocess
    import sys

    from gradian.attribute.methods import REGISTRY, Method, method_of
    from gradian.options.attribute import FACTOR_METHODS
    from gradian.options.attribute import METHODS as OPT_METHODS

    assert tuple(REGISTRY) == OPT_METHODS
    assert all(isinstance(m, Method) and m.name == name and method_of(name) is m for name, m in REGISTRY.items())
    assert tuple(n for n, m in REGISTRY.items() if m.factored) == FACTOR_METHODS
    assert [n for n, m in REGISTRY.items() if m.normalized] == ["cosine"]
    with pytest.raises(ValueError, match="unknown method 'tracin'"):
        method_of("tracin")
    code = "import sys, gradian.options; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_report_options_read_back_old_and_new_reports():
    saved = AttributeOptions(method="kfac", proj_dim=16, extra_methods=("cosine",))
    assert report_options({"options": saved.to_dict(), "settings": {"method": "ekfac"}}) == saved
    # a report.json from before the options were saved: the values its settings recorded, the rest defaults
    settings = {"method": "datainf", "threshold": 0.05, "batch_size": 4, "n_train": 9, "device": "cpu",
                "generations": {"items": 13, "max_new_tokens": 32}, "checkpoints": [{"label": "step 2"}]}  # fmt: skip
    old = report_options({"settings": settings})
    assert (old.method, old.threshold, old.batch_size, old.top) == ("datainf", 0.05, 4, DEFAULTS.top)
    assert (old.generations, old.checkpoints, old.device) == (
        DEFAULTS.generations,
        "last",
        None,
    )  # results, not options
    assert report_options({}) == AttributeOptions()


def test_the_python_api_takes_option_keywords_and_refuses_unknown_ones(tmp_path):
    from gradian.attribute.api import attribute, split_kwargs

    ins, opts = split_kwargs({"train": "t.jsonl", "method": "kfac"}, None, AttributeOptions(batch_size=4))
    assert ins.train == "t.jsonl" and (opts.method, opts.batch_size) == ("kfac", 4)
    with pytest.raises(OptionError, match="unknown attribute option 'methd'"):
        attribute(tmp_path, methd="kfac")
    with pytest.raises(OptionError, match="unknown --weighting 'loss'"):
        attribute(tmp_path, weighting="loss")


def test_the_attribute_command_passes_its_options_through(tmp_path):
    """`gradian attribute` builds the options from its flags and hands them on: a bad value stops it in one line,
    a good one reaches the file checks (here: no adapter in an empty run folder)."""
    runner = CliRunner()
    app = _app()
    res = runner.invoke(app, ["attribute", "--run", str(tmp_path), "--out", str(tmp_path / "o"), "--top", "3"])
    assert isinstance(res.exception, GradianError) and "no PEFT adapter found" in str(res.exception), res.output
    res = runner.invoke(app, ["attribute", "--run", str(tmp_path), "--query", "some"])
    assert isinstance(res.exception, OptionError) and "unknown --query 'some'" in str(res.exception)


def test_gradian_report_reads_the_saved_options_back(tmp_path):
    """`gradian report` re-renders a report.json with its options checked through the dataclass (and one without)."""
    from gradian.report.cli import rerender

    examples = [{"index": i, "id": f"r{i}", "score": float(5 - i), "rank": i + 1} for i in range(5)]
    base = {"schema": "gradian.report/1", "method": "kfac", "settings": {"method": "kfac"}, "examples": examples,
            "regressed": [], "eval": [], "contributions": [], "notes": []}  # fmt: skip
    saved = AttributeOptions(method="kfac", top=3).to_dict()
    (tmp_path / "report.json").write_text(json.dumps(base | {"options": saved}))
    rerender(tmp_path)
    options = json.loads((tmp_path / "report.json").read_text())["options"]
    assert {k: v for k, v in options.items() if k != "verdict"} == saved
    assert options["verdict"] == VerdictOptions().to_dict()  # the verdict's thresholds, saved beside them
    rerender(tmp_path, verdict={"min_stability": 0.5})  # `gradian report --min-stability 0.5`
    assert json.loads((tmp_path / "report.json").read_text())["options"]["verdict"]["min_stability"] == 0.5
    rerender(tmp_path)  # the saved thresholds are read back
    written = json.loads((tmp_path / "report.json").read_text())
    assert (
        written["options"]["verdict"]["min_stability"] == 0.5 and written["verdict"]["policy"]["min_stability"] == 0.5
    )
    (tmp_path / "report.json").write_text(json.dumps(base | {"options": saved | {"method": "tracin"}}))
    with pytest.raises(OptionError, match="unknown --method 'tracin'"):
        rerender(tmp_path)
    (tmp_path / "report.json").write_text(json.dumps(base))  # older: no options, re-rendered with the verdict's
    rerender(tmp_path)
    assert list(json.loads((tmp_path / "report.json").read_text())["options"]) == ["verdict"]


def test_every_row_the_report_shows_is_split_by_token_by_default():
    """Token harm is computed for the rows a user sees (the HTML/Markdown top rows, the terminal's ``--top``), and no
    more: each extra row costs a forward-mode pass."""
    from gradian.report.render import TOP_ROWS_SHOWN

    assert DEFAULTS.token_harm == max(TOP_ROWS_SHOWN, DEFAULTS.top)
