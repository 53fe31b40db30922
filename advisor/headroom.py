"""How far from the limit: the model's FLOPs per sample (runner/flops.py, the baseline's) turned
into achieved TFLOP/s and MFU for the baseline, the kept stack and the data-free ceiling (its trial:
advisor.trials.ceiling), each against one yardstick, the GPU's dense bf16 peak, with the dtype's own
peak beside it (advisor.roofline)."""

from __future__ import annotations

from advisor import measure, roofline


def flops_per_sample(child: dict) -> float | None:
    per_step = (child.get("flops") or {}).get("per_step")
    batch = child.get("batch_size")
    if not per_step or not batch:
        return None
    return per_step / (batch * measure.micro_batches(child))


def summary(doc: dict, child: dict) -> dict:
    """run.json's "roofline": FLOPs, and per run (baseline, kept stack, ceiling) samples/s,
    TFLOP/s, MFU against the bf16 peak, the dtype's peak and MFU against it (dtype_mfu); the
    stack as a fraction of the ceiling."""
    gpu = (doc.get("environment") or {}).get("gpu_name")
    fps = flops_per_sample(child)
    flops = child.get("flops") or {}
    out: dict = {"flops_per_step": flops.get("per_step"), "flops_per_sample": fps, "gpu_name": gpu,
                 "why_not": flops.get("why_not") if not fps else None,
                 "bf16_peak_tflops": roofline.peak_tflops(gpu, "bf16")}
    base_rate = (doc.get("measurement") or {}).get("samples_per_s")
    # samples/s count every rank's batch; TFLOP/s and MFU are each GPU's (one rank a GPU)
    gpus = max(1, int((doc.get("measurement") or {}).get("ranks") or 1))

    def for_rate(rate, dtype):   # every run's MFU on one scale: the bf16 peak (roofline.on_yardstick)
        return roofline.on_yardstick(roofline.for_rate(fps, rate / gpus if rate else rate, gpu, dtype),
                                     out["bf16_peak_tflops"])
    out["baseline"] = {"samples_per_s": base_rate, **for_rate(base_rate, roofline.compute_dtype(doc.get("config")))}
    trials = doc.get("trials") or []
    kept = measure.kept_trial(trials)
    if kept is not None:
        out["stack"] = {"samples_per_s": kept.get("samples_per_s"), "trial": kept.get("name"),
                        **for_rate(kept.get("samples_per_s"), kept.get("compute_dtype") or "fp32")}
    if (six := six_n_tokens(doc, child)) is not None:
        out["transformer"] = six
        real_rate = (doc.get("measurement") or {}).get("tokens_per_s")
        if real_rate and out["bf16_peak_tflops"]:   # the MFU of the real tokens alone, as LLM papers count it
            six["real_token_mfu"] = 6 * six["params"] * real_rate / gpus / (out["bf16_peak_tflops"] * 1e12)
    ceiling = next((t for t in trials if t.get("ceiling")), None)
    if ceiling is not None:
        rate = ceiling.get("samples_per_s") if ceiling.get("status") == "bound" else None
        out["ceiling"] = {"samples_per_s": rate, "status": ceiling.get("status"), "reason": ceiling.get("reason"),
                          **for_rate(rate, ceiling.get("compute_dtype") or "fp32")}
        top = (out.get("stack") or out["baseline"]).get("samples_per_s")
        if rate and top:
            out["ceiling"]["kept_fraction"] = top / rate
    return out


def six_n_tokens(doc: dict, child: dict) -> dict | None:
    """A transformer's training FLOPs the usual way, 6 x parameters x tokens a step (every token
    the step computes, padding included; attention's own products left out), beside the count
    of the model's operators: {"params", "tokens_per_step", "flops_per_step", "counted_ratio"}.
    None without token counts (runner/tokens.py) or a parameter count."""
    counted = measure.tokens(child)
    steps = len(measure.step_times(child))
    params = (((doc.get("config") or {}).get("parameters") or {}).get("value") or {}).get("count")
    if counted is None or not steps or not params:
        return None
    per_step = counted[1] / steps
    six = 6.0 * params * per_step
    mine = (child.get("flops") or {}).get("per_step")
    return {"params": params, "tokens_per_step": per_step, "flops_per_step": six,
            "counted_ratio": mine / six if mine else None}


def lines(r: dict | None) -> list[str]:
    """The roofline in words, a line each (terminal)."""
    if not r:
        return []
    six = _six_line(r.get("transformer"))
    if not r.get("flops_per_sample"):
        return [f"FLOPs not counted: {r.get('why_not') or 'no FLOP count'}", *six]
    if not r.get("gpu_name"):
        return [f"compute: {_flops(r['flops_per_sample'])} a sample; a CPU run has no GPU peak to compare with", *six]
    out = [f"compute: {_flops(r['flops_per_sample'])} a sample ({_flops(r.get('flops_per_step'))} a step)",
           "baseline: " + roofline.describe(r["baseline"])]
    if r.get("stack"):
        out.append("kept fixes: " + roofline.describe(r["stack"]))
    out += six
    c = r.get("ceiling")
    if c and c.get("samples_per_s"):
        frac = c.get("kept_fraction")
        out.append(f"data-free ceiling: {c['samples_per_s']:,.0f} samples/s, " + roofline.describe(c)
                   + (f"; {'the kept fixes reach' if r.get('stack') else 'the baseline reaches'} {frac:.0%} of it"
                      if frac else ""))
    elif c:
        out.append(f"data-free ceiling: {c.get('status')} ({c.get('reason')})")
    return out


def _six_line(t: dict | None) -> list[str]:
    """The 6 x parameters x tokens cross-check in words (none for a model fed no token counts)."""
    if not t:
        return []
    ratio = t.get("counted_ratio")
    return [f"6 x parameters x tokens: {_flops(t['flops_per_step'])} a step ({t['params']:,} parameters, "
            f"{t['tokens_per_step']:,.0f} tokens)" + (f"; the counted operators are {ratio:.2f}x that" if ratio else "")
            + (f"; MFU on the real tokens {t['real_token_mfu']:.1%}" if t.get("real_token_mfu") else "")]


def _flops(n) -> str:
    if not n:
        return "?"
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} FLOP"
