"""Run the selected rules over a context and collect findings and skip notes."""

from __future__ import annotations

from collections.abc import Iterable

from gradian.diagnose.catalog import all_rules, find_rule
from gradian.diagnose.context import DiagnoseContext
from gradian.diagnose.registry import Hit, Params, Rule, match_selector
from gradian.diagnose.types import Finding, Fix, Note, Severity
from gradian.errors import GradianError
from gradian.gcpause import gc_paused


def select_rules(select: Iterable[str] = (), ignore: Iterable[str] = ()) -> list[Rule]:
    select, ignore = list(select), list(ignore)
    rules = all_rules()
    from gradian.diagnose.registry import GROUPS

    for s in [*select, *ignore]:
        low = s.strip().lower()
        if not low or low == "all" or low in GROUPS.values() or low == "cross_cutting":
            continue
        if find_rule(s) is None and not any(r.code.upper().startswith(s.strip().upper()) for r in rules):
            raise GradianError(f"unknown rule {s!r}", fix="see `gradian rules` for codes and names")
    if select:
        rules = [r for r in rules if match_selector(r, select)]
    return [r for r in rules if not match_selector(r, ignore)]


# what still runs on a file of preference pairs: it is read, and named so (a KTO file is checked: SFT on it trains on
# its replies)
PREFERENCE_RULES = ("D101", "D102")


def missing_need(rule: Rule, ctx: DiagnoseContext) -> str | None:
    for need in rule.needs:
        if need == "train" and not ctx.train:
            return "no train rows (pass --train or --run)"
        if need in ("train", "formatted") and rule.code not in PREFERENCE_RULES and ctx.preference_rows()[0] == "pairs":
            return "the train file holds preference pairs, not SFT rows (D102): pass the SFT file to check its rows"
        if need == "formatted" and ctx.formatted is None:
            return f"token-level check skipped: {ctx.formatted_note or 'no tokenizer (pass --tokenizer or --base)'}"
        if need == "tokenizer" and ctx.tokenizer is None:
            return f"needs the tokenizer: {ctx.formatted_note or 'pass --tokenizer or --base'}"
        if need == "setup" and not ctx.setup_known:
            return "no training config found (pass --config or --run)"
        if need == "logs" and not ctx.logs.points:
            return "no trainer logs found (pass --logs or --run with trainer_state.json)"
        if need == "eval" and not ctx.eval:
            return "no eval rows (pass --eval)"
        if need == "adapter" and not ctx.artifacts.adapter_config:
            return "no adapter_config.json found (pass --adapter or --run)"
    return None


def params_for(rule: Rule, ctx: DiagnoseContext) -> Params:
    p = Params({k: t.default for k, t in rule.thresholds.items()})
    for key in (rule.name, rule.code):
        p.update(ctx.thresholds.get(key, {}))
    return p


def run_rule(rule: Rule, ctx: DiagnoseContext) -> list[Finding]:
    out = []
    for hit in rule.run(ctx, params_for(rule, ctx)) or ():
        assert isinstance(hit, Hit)
        fix = hit.fix if isinstance(hit.fix, Fix) or hit.fix is None else Fix(text=hit.fix)
        if fix is None:
            fix = Fix(text=rule.fix)
        sev = Severity.parse(hit.severity) if hit.severity is not None else rule.severity
        out.append(Finding(rule.code, rule.name, sev, hit.message, dict(hit.evidence), fix, cause=rule.cause))
    return out


def run_rules(ctx: DiagnoseContext, rules: list[Rule], *, strict: bool = False) -> tuple[list[Finding], list[Note]]:
    findings: list[Finding] = []
    notes: list[Note] = []
    with gc_paused():  # per-row measures of 100k rows: see gradian.gcpause
        for r in rules:
            why = missing_need(r, ctx)
            if why:
                notes.append(Note(r.code, r.name, why))
                continue
            try:
                findings.extend(run_rule(r, ctx))
            except Exception as err:  # one broken rule must not hide the others
                if strict:
                    raise
                notes.append(Note(r.code, r.name, f"internal error in the rule: {type(err).__name__}: {err}"))
    findings.sort(key=lambda f: (-f.severity.rank, f.code))
    return findings, notes
