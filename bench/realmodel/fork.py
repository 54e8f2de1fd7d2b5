"""Where the fine-tune forks from the base model's reply: per generated eval item of a run's prompts-only attribution,
the NLL rise (fine-tune minus base) at the first token where the fine-tune departs (its most likely token differs from
the base model's, or its NLL of the base's token is more than 0.1 nats higher: the rule ``--eval-cut`` uses), beside
the item's mean rise over all of its tokens (what ``gradian attribute`` scores), against what a person sees in the two
models' greedy replies (``suite.changed``; a refusal counts as a change).

    python bench/realmodel/fork.py chat_refusals_s0 chat_borderline_s0 overrefusal_s0 refusals_s0
    # bench/results/realmodel_fork.{json,md}

A fine-tune that sharpens the base model's own style (trained on its replies) lowers the NLL of every token it agrees
with; a reply that flips at its first token (a refusal) then rises at that one token and falls over the rest, so its
mean over the item can fall while a person sees a different reply.
"""

from __future__ import annotations

import json
import statistics
import sys

from suite import RESULTS, WORK, _load, changed, refuses

CUT_RISE = 0.1


def per_token(model, tok, prompt: list[dict], completion: str):
    """NLL of each completion token, the model's most likely token at each position, and the log-probabilities
    (the prompt in the chat template, the completion open: no end of turn)."""
    import torch

    p = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    c = tok(completion, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([p + c])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, len(p) - 1 : -1].float(), -1)
    tgt = torch.tensor(c)
    return (-logp.gather(-1, tgt[:, None])[:, 0]).tolist(), logp.argmax(-1).tolist(), logp


def run(name: str) -> dict:
    d = WORK / name
    rep = json.loads((d / "attr_prompts" / "report.json").read_text())
    prompts = [r["prompt"] for r in (json.loads(x) for x in (d / "eval_prompts.jsonl").read_text().splitlines())]
    replies = json.loads((d / "replies.json").read_text())
    model, tok = _load(d / "run")
    items = []
    for e in rep["eval"]:
        i = int(e.get("row", e["index"]))
        with model.disable_adapter():
            nb, _, lb = per_token(model, tok, prompts[i], e["completion"])
        nf, am, lf = per_token(model, tok, prompts[i], e["completion"])
        ids = tok(e["completion"], add_special_tokens=False)["input_ids"]
        rise = [f - b for f, b in zip(nf, nb, strict=True)]
        fork = next((t for t in range(len(ids)) if am[t] != ids[t] or rise[t] > CUT_RISE), None)
        # at the fork, how much more the fine-tune prefers its own token over the base model's than the base does
        margin = None
        if fork is not None and am[fork] != ids[fork]:
            a, b = am[fork], ids[fork]
            margin = float((lf[fork, a] - lf[fork, b]) - (lb[fork, a] - lb[fork, b]))
        items.append({
            "row": i, "tokens": len(ids), "mean_rise": statistics.fmean(rise), "fork": fork,
            "fork_rise": rise[fork] if fork is not None else None, "fork_margin": margin,
            "seen": changed(replies[i]["base"], replies[i]["finetuned"]),
            "refusal": refuses(replies[i]["finetuned"]),
            "gradian_regressed": bool(e.get("regressed")),
        })  # fmt: skip
    seen = [it for it in items if it["seen"]]
    fr = [it["fork_rise"] or 0.0 for it in items]
    return {
        "run": name, "items": len(items), "seen_changed": len(seen),
        "refusals": sum(it["refusal"] for it in items),
        "gradian_regressed": sum(it["gradian_regressed"] for it in items),
        "mean_rise_above_0_of_seen": sum(it["mean_rise"] > 0 for it in seen),
        "fork_at_first_token_of_seen": sum(it["fork"] == 0 for it in seen),
        "median_fork_rise_seen": statistics.median([it["fork_rise"] or 0.0 for it in seen]) if seen else None,
        "median_fork_rise_unseen": statistics.median([it["fork_rise"] or 0.0 for it in items if not it["seen"]])
        if len(seen) < len(items) else None,
        "median_mean_rise_seen": statistics.median([it["mean_rise"] for it in seen]) if seen else None,
        "median_fork_margin_refusals": statistics.median([it["fork_margin"] or 0.0 for it in items if it["refusal"]])
        if any(it["refusal"] for it in items) else None,
        "median_fork_margin_others": statistics.median([it["fork_margin"] or 0.0 for it in items
                                                        if not it["refusal"]]),
        "fork_margin_above_1_refusals": sum((it["fork_margin"] or 0.0) > 1 for it in items if it["refusal"]),
        "fork_margin_above_1_others": sum((it["fork_margin"] or 0.0) > 1 for it in items if not it["refusal"]),
        "median_fork_rise_all": statistics.median(fr),
        "per_item": items,
    }  # fmt: skip


def margins(name: str, adapter: str) -> dict:
    """Fork margins of one adapter of a run (the fine-tune, or a retrain) over the base model's whole greedy replies
    (replies.json): how many replies it forks from at a token it prefers to the base model's, and by how much."""
    d = WORK / name
    prompts = [r["prompt"] for r in (json.loads(x) for x in (d / "eval_prompts.jsonl").read_text().splitlines())]
    replies = json.loads((d / "replies.json").read_text())
    model, tok = _load(d / adapter)
    ms = []
    for p, r in zip(prompts, replies, strict=True):
        with model.disable_adapter():
            _, _, lb = per_token(model, tok, p, r["base"])
        _, am, lf = per_token(model, tok, p, r["base"])
        ids = tok(r["base"], add_special_tokens=False)["input_ids"]
        fork = next((t for t in range(len(ids)) if am[t] != ids[t]), None)
        if fork is not None:
            a, b = am[fork], ids[fork]
            ms.append(float((lf[fork, a] - lf[fork, b]) - (lb[fork, a] - lb[fork, b])))
    return {
        "run": name, "adapter": adapter, "prompts": len(prompts), "forks": len(ms),
        "forks_at_margin_above_1": sum(m > 1 for m in ms), "forks_at_margin_above_2": sum(m > 2 for m in ms),
        "median_margin": statistics.median(ms) if ms else None,
    }  # fmt: skip


def main(names: list[str]) -> None:
    rows = [run(n) for n in names]
    pairs = [margins(n, a) for n in names for a in ("run", "run_drop_planted") if (WORK / n / a).is_dir()]
    (RESULTS / "realmodel_fork.json").write_text(json.dumps({"items": rows, "adapters": pairs}, indent=1))
    cols = [c for c in rows[0] if c != "per_item"]

    def f(x: object) -> str:
        return "–" if x is None else (f"{x:.2f}" if isinstance(x, float) else str(x))

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(f(r[c]) for c in cols) + " |" for r in rows]
    c2 = list(pairs[0]) if pairs else []
    lines += [
        "",
        "Each fine-tune beside its retrain without the planted rows, over the base model's whole replies "
        "(64 tokens): the replies it forks from at a token of its own, and how much more it prefers that token "
        "than the base model does.",
        "",
        "| " + " | ".join(c2) + " |",
        "|" + "---|" * len(c2),
    ]
    lines += ["| " + " | ".join(f(r[c]) for c in c2) + " |" for r in pairs]
    (RESULTS / "realmodel_fork.md").write_text(
        "# Where the fine-tune forks from the base model's reply\n\nProduced by `python bench/realmodel/fork.py "
        + " ".join(names)
        + "` (its docstring says what each column is). *seen*: the prompts whose greedy reply a "
        "person sees change; *fork rise*: the NLL rise at the first token where the fine-tune departs from the base "
        "model's reply (0 where it never does); *mean rise*: the item's mean rise per token, what `gradian attribute` "
        "scores; *fork margin*: at the fork, how much more (nats) the fine-tune prefers its own next token over "
        "the base model's than the base model does.\n\n" + "\n".join(lines) + "\n"
    )
    print((RESULTS / "realmodel_fork.md").read_text())


if __name__ == "__main__":
    main(sys.argv[1:])
