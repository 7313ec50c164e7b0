#!/usr/bin/env python3
"""The cases of the vLLM parser measurement, their runner and the report (standard library only).

Driven by bench/vllm_parsers/run.sh; each step can be run alone:

    cases.py cases --reference REF.json --out CASES.json
        the case argvs, built from the role's reference argv (reference_argv.py's output)
    cases.py run --label L --python PY [--pythonpath DIR] [--install INFO.json]
                 [--about KEY=VALUE ...] --cases CASES.json --out TARGET.json
        runs files/vllm_flags_check.py once per case with PY, each as its own process (as the role
        runs it: one-off, cold), times it, then runs probe.py with PY (facts, warm timings, the
        parser's options, the quantization list)
    cases.py record-install --venv DIR --version V --seconds S --torch-request R
                 [--pip-report F] [--pip-config F] --out INFO.json
        what installing vLLM into DIR cost (run.sh calls it right after the install)
    cases.py report --work DIR --json OUT.json --md OUT.md
        merges DIR/target-*.json and DIR/commands.txt into the results

Each check runs with a clean environment: the caller's, less VLLM_*, NVIDIA_*, CUDA_*, HF_* and
VDF_* (a one-off container without GPUs), plus PYTHONPATH for the double and
PYTHONDONTWRITEBYTECODE=1 there (the double's source is an image build context).
"""

import argparse
import contextlib
import datetime
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "files" / "vllm_flags_check.py"
PROBE = Path(__file__).resolve().parent / "probe.py"
ERROR_CHARS = 300
CHECK_TIMEOUT_S = 600

# name -> (label for the table, expected: True accepted / False refused)
CASES = {
    "a_reference": ("(a) role reference argv", True),
    "b_quantization_inc": ("(b) + `--quantization inc`", True),
    "c_quantization_auto_round": ("(c) + `--quantization auto_round`", False),
    "d_unknown_flag": ("(d) + `--no-such-flag`", False),
    "e_tool_calling": ("(e) `--enable-auto-tool-choice --tool-call-parser qwen3_coder`", True),
    "f_bad_choice": ("(f) + `--kv-cache-dtype fp7`", False),
    # two more the role's comments rely on
    "g_tool_choice_without_parser": ("(g) `--enable-auto-tool-choice` without a parser", False),
    "h_quantization_auto_round_hyphen": ("(h) + `--quantization auto-round`", False),
    # two where the double differed from both releases (fixed since)
    "i_kv_cache_dtype_float16": ("(i) + `--kv-cache-dtype float16`", True),
    "j_no_disable_log_stats": ("(j) + `--no-disable-log-stats`", False),
}
TOOL_FLAGS = ["--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder"]


def build_cases(reference):
    """{name: argv} for CASES, from the role's reference argv."""
    ref = list(reference)
    tools = list(ref)
    if "--enable-auto-tool-choice" not in tools:
        tools.append("--enable-auto-tool-choice")
    if "--tool-call-parser" not in tools:
        tools += TOOL_FLAGS[1:]
    without_parser = list(ref)
    if "--tool-call-parser" in without_parser:
        at = without_parser.index("--tool-call-parser")
        del without_parser[at:at + 2]
    if "--enable-auto-tool-choice" not in without_parser:
        without_parser.append("--enable-auto-tool-choice")
    return {
        "a_reference": ref,
        "b_quantization_inc": ref + ["--quantization", "inc"],
        "c_quantization_auto_round": ref + ["--quantization", "auto_round"],
        "d_unknown_flag": ref + ["--no-such-flag"],
        "e_tool_calling": tools,
        "f_bad_choice": ref + ["--kv-cache-dtype", "fp7"],
        "g_tool_choice_without_parser": without_parser,
        "h_quantization_auto_round_hyphen": ref + ["--quantization", "auto-round"],
        "i_kv_cache_dtype_float16": ref + ["--kv-cache-dtype", "float16"],
        "j_no_disable_log_stats": ref + ["--no-disable-log-stats"],
    }


def clean_env(pythonpath=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VLLM_", "NVIDIA_", "CUDA_", "HF_", "VDF_"))}
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def last_json_line(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def run_check(python, args, env):
    """(exit code, printed JSON or None, seconds, stderr tail) of one check process."""
    started = time.perf_counter()
    proc = subprocess.run([python, str(CHECK), json.dumps(args)], env=env, capture_output=True,
                          text=True, timeout=CHECK_TIMEOUT_S, check=False)
    seconds = time.perf_counter() - started
    return proc.returncode, last_json_line(proc.stdout), seconds, proc.stderr[-2000:]


def cmd_cases(opts):
    reference = json.loads(Path(opts.reference).read_text())
    Path(opts.out).write_text(json.dumps(build_cases(reference), indent=1) + "\n")
    return 0


def cmd_run(opts):
    cases = json.loads(Path(opts.cases).read_text())
    env = clean_env(opts.pythonpath)
    # One untimed warm-up: a fresh venv compiles vLLM's .pyc on its first import; the cases then
    # measure what each later one-off check costs.
    warm_code, _, warm_seconds, warm_err = run_check(opts.python, cases["a_reference"], env)
    results = {}
    for name, args in cases.items():
        code, printed, seconds, stderr = run_check(opts.python, args, env)
        error = (printed or {}).get("error")
        entry = {
            "exit": code,
            "ok": (printed or {}).get("ok"),
            "accepted": code == 0,
            "expected": "accepted" if CASES[name][1] else "refused",
            "as_expected": (code == 0) == CASES[name][1] and code in (0, 2),
            "error": None if error is None else error[:ERROR_CHARS],
            "seconds": round(seconds, 3),
            "check_output": printed,
        }
        if printed is None or code not in (0, 2):
            entry["stderr_tail"] = stderr[-ERROR_CHARS:]
        results[name] = entry
        print(f"  {opts.label:>7} {name:<34} exit {code}  {seconds:6.2f} s  "
              f"{(error or '')[:90]}", flush=True)
    probe = subprocess.run([opts.python, str(PROBE), opts.cases], env=env, capture_output=True,
                           text=True, timeout=CHECK_TIMEOUT_S, check=False)
    facts = last_json_line(probe.stdout) or {"probe_error": probe.stderr[-2000:],
                                             "probe_exit": probe.returncode}
    for name, warm in (facts.get("warm_check") or {}).items():
        if name in results:
            results[name]["warm_check_seconds"] = warm["seconds"]
            results[name]["warm_check_exit"] = warm["exit"]
    install = read_install(opts.install) if opts.install else None
    target = {
        "label": opts.label,
        "kind": "double" if facts.get("vllm_is_test_double") else "real",
        "python_command": opts.python,
        "pythonpath": opts.pythonpath,
        "about": dict(item.split("=", 1) for item in opts.about),
        "warmup": {"exit": warm_code, "seconds": round(warm_seconds, 3),
                   **({"stderr_tail": warm_err[-ERROR_CHARS:]} if warm_code not in (0, 2) else {})},
        "install": install,
        "facts": facts,
        "cases": results,
    }
    Path(opts.out).write_text(json.dumps(target, indent=1, sort_keys=True) + "\n")
    return 0


def tree_bytes(path):
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def read_install(path):
    """The install record plus what run.sh uninstalled since (.vdf-removed.txt beside it)."""
    path = Path(path)
    info = json.loads(path.read_text())
    removed = dict(info.get("removed") or {})
    listed = path.parent / ".vdf-removed.txt"
    if listed.is_file():
        for line in listed.read_text().splitlines():
            name, _, why = line.partition("\t")
            removed[name] = why
    info["removed"] = {k: v.replace(str(path.parent), "<venv>") for k, v in removed.items()}
    return info


def cmd_record_install(opts):
    venv = Path(opts.venv)
    info = {
        "vllm": opts.version,
        "venv": str(venv),
        "seconds": round(float(opts.seconds), 1),
        "torch_request": opts.torch_request,
        "venv_bytes": tree_bytes(venv),
        "recorded_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if opts.pip_config and Path(opts.pip_config).is_file():
        info["pip_config"] = Path(opts.pip_config).read_text().splitlines()
    if opts.pip_report and Path(opts.pip_report).is_file():
        report = json.loads(Path(opts.pip_report).read_text())
        sources = {"local disk": 0, "package index": 0}
        picked = {}
        for item in report.get("install", []):
            url = item.get("download_info", {}).get("url", "")
            sources["local disk" if url.startswith("file:") else "package index"] += 1
            name = item["metadata"]["name"]
            if name in ("vllm", "torch", "torchvision", "torchaudio", "flashinfer-python"):
                picked[name] = {"version": item["metadata"]["version"],
                                "from": "local disk" if url.startswith("file:") else url[:60]}
        info["pip_packages"] = sources
        info["pip_picked"] = picked
    Path(opts.out).write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
    return 0


# ---------------------------------------------------------------------------------------------
# report


def option_index(options):
    """option string (or positional dest) -> description, from probe.py's parser_options."""
    index = {}
    for entry in (options or {}).values():
        if not isinstance(entry, dict):
            continue
        for opt in entry["options"]:
            index[opt] = entry
    return index


def compare_flags(double_options, real_options):
    """Where the double's serve parser differs from a real one, for the double's options only.
    Each finding has a direction: "double accepts more" (an argv the double passes and the real
    parser refuses), "double refuses more" (the reverse), "differs" (both ways) or "info"."""
    if not isinstance(real_options, dict) or "error" in real_options or not real_options:
        return [{"flag": "*", "what": "real parser not available", "direction": "info",
                 "detail": (real_options or {}).get("error") if isinstance(real_options, dict)
                 else real_options}]
    real = option_index(real_options)
    findings = []

    def add(flag, what, direction, detail):
        findings.append({"flag": flag, "what": what, "direction": direction, "detail": detail})

    for entry in (double_options or {}).values():
        if not isinstance(entry, dict):
            continue
        longs = [o for o in entry["options"] if o.startswith("--")]
        name = (longs or entry["options"])[0] if entry["options"][0].startswith("-") \
            else entry["dest"]
        missing = [o for o in entry["options"] if o not in real]
        if missing:
            add(name, "option strings the real parser does not know", "double accepts more",
                missing)
        match = next((real[o] for o in entry["options"] if o in real), None)
        if match is None:
            continue
        if match["takes_value"] != entry["takes_value"]:
            add(name, "takes a value in one only", "differs",
                {"double": entry["takes_value"], "real": match["takes_value"]})
        elif str(match["nargs"]) != str(entry["nargs"]):
            add(name, "nargs differ", "differs", {"double": entry["nargs"],
                                                  "real": match["nargs"]})
        dch, rch = entry["choices"], match["choices"]
        if dch is not None and rch is None:
            add(name, "choices: the double has a list, the real parser takes any value "
                "(checked later, if at all)", "double refuses more", {"double": dch})
        elif dch is None and rch is not None:
            add(name, "choices: the real parser has a list, the double takes any value",
                "double accepts more", {"real": rch})
        elif dch is not None:
            only_double = sorted(set(dch) - set(rch))
            only_real = sorted(set(rch) - set(dch))
            if only_double:
                add(name, "choices only the double accepts", "double accepts more", only_double)
            if only_real:
                add(name, "choices only the real parser accepts", "double refuses more",
                    only_real)
        extra = [o for o in match["options"] if o not in entry["options"]]
        if extra:
            add(name, "option strings only the real parser has", "info", extra)
        if entry["action"] != match["action"]:
            add(name, "action class", "info", {"double": entry["action"],
                                               "real": match["action"]})
    return findings


def load_targets(work):
    targets = {}
    for path in sorted(Path(work).glob("target-*.json")):
        target = json.loads(path.read_text())
        targets[target["label"]] = target
    return targets


def fmt_bytes(n):
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def short(text, limit=110):
    text = (text or "").replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def pairs_of(targets):
    """[(double label, real label)]: each double against the real release of its version string,
    or against every real release when none has it."""
    reals = [label for label, t in targets.items() if t["kind"] == "real"]
    pairs = []
    for d, target in targets.items():
        if target["kind"] != "double":
            continue
        same = [r for r in reals
                if targets[r]["facts"].get("vllm_version") == target["facts"].get("vllm_version")]
        pairs += [(d, r) for r in (same or reals)]
    return pairs


def verdict_word(text):
    """'accepted' / 'refused' from probe.py's kv_cache_dtype_at_config values."""
    return "accepted" if text == "accepted" else "refused" if str(text).startswith("refused") \
        else str(text)


def compare_cache_config(dkv, rkv):
    """The double's vllm.config.CacheConfig against a real one: CacheDType names and order, and
    accept/refuse of each --kv-cache-dtype value probe.py gave both."""
    if not isinstance(dkv, dict) or not isinstance(rkv, dict) or "error" in dkv or "error" in rkv:
        return {"error": {"double": (dkv or {}).get("error"), "real": (rkv or {}).get("error")}}
    dn, rn = dkv.get("CacheDType"), rkv.get("CacheDType")
    names = None
    if isinstance(dn, list) and isinstance(rn, list):
        names = {"double_count": len(dn), "real_count": len(rn), "same_list": dn == rn,
                 "only_in_double": [n for n in dn if n not in rn],
                 "only_in_real": [n for n in rn if n not in dn]}
    values = {v: {"double": verdict_word(dkv[v]), "real": verdict_word(rkv[v]),
                  "agree": verdict_word(dkv[v]) == verdict_word(rkv[v])}
              for v in rkv if v != "CacheDType" and v in dkv}
    return {"names": names, "values": values,
            "all_values_agree": all(v["agree"] for v in values.values())}


def compare_pair(double, real):
    """The double's target against a real one: cases, quantization list, serve flags,
    CacheConfig's cache dtypes."""
    dfacts, rfacts = double["facts"], real["facts"]
    per_case = {}
    for name in CASES:
        d, r = double["cases"].get(name), real["cases"].get(name)
        if d is not None and r is not None:
            per_case[name] = {"real_exit": r["exit"], "double_exit": d["exit"],
                              "agree": d["accepted"] == r["accepted"]}
    dq, rq = dfacts.get("quantization_methods"), rfacts.get("quantization_methods")
    quant = None
    if isinstance(dq, list) and isinstance(rq, list):
        quant = {"double_count": len(dq), "real_count": len(rq),
                 "only_in_double": [m for m in dq if m not in rq],
                 "only_in_real": [m for m in rq if m not in dq],
                 "same_order": [m for m in dq if m in rq] == [m for m in rq if m in dq]}
    flags = compare_flags(dfacts.get("parser_options"), rfacts.get("parser_options"))
    return {
        "cases": per_case,
        "all_cases_agree": all(c["agree"] for c in per_case.values()),
        "version_string": {"double": dfacts.get("vllm_version"),
                           "real": rfacts.get("vllm_version")},
        "parser_module": {"double": dfacts.get("parser_module"),
                          "real": rfacts.get("parser_module")},
        "quantization_methods": quant,
        "cache_config": compare_cache_config(dfacts.get("kv_cache_dtype_at_config"),
                                             rfacts.get("kv_cache_dtype_at_config")),
        "flag_differences": flags,
        "double_accepts_more": [f for f in flags if f["direction"] == "double accepts more"],
        "double_refuses_more": [f for f in flags if f["direction"] == "double refuses more"],
    }


def cmd_report(opts):
    work = Path(opts.work)
    targets = load_targets(work)
    cases_argv = json.loads((work / "cases.json").read_text())
    commands = (work / "commands.txt").read_text().splitlines() \
        if (work / "commands.txt").exists() else []
    out = {
        "what": "files/vllm_flags_check.py against the real parsers of vLLM releases and the "
                "project's vLLM double (molecule/images/vllm-double/src)",
        "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(),
                 "system": f"{platform.system()} {platform.release()}",
                 "note": "shared 2-core machine, other jobs running: seconds are indicative"},
        "check_sha256": hashlib.sha256(CHECK.read_bytes()).hexdigest(),
        "reference_argv": cases_argv["a_reference"],
        "cases": {name: {"label": CASES[name][0],
                         "expected": "accepted" if CASES[name][1] else "refused",
                         "argv": cases_argv[name]} for name in CASES if name in cases_argv},
        "targets": {},
        "double_vs_real": {},
        "commands": commands,
    }
    for label, target in targets.items():
        facts = target["facts"]
        entry = {
            "kind": target["kind"],
            "about": target.get("about") or {},
            "vllm_version": facts.get("vllm_version"),
            "parser_module": facts.get("parser_module"),
            "python": facts.get("python"),
            "python_command": target["python_command"],
            "pythonpath": target["pythonpath"],
            "torch": facts.get("torch"),
            "torchvision": facts.get("torchvision"),
            "torchaudio": facts.get("torchaudio"),
            "flashinfer_python": facts.get("flashinfer_python"),
            "transformers": facts.get("transformers"),
            "platform": facts.get("platform"),
            "install": target["install"],
            "warmup_check": target["warmup"],
            "first_check_in_process": facts.get("first_check"),
            "parser_build_seconds": facts.get("parser_build_seconds"),
            "parser_option_count": len(facts.get("parser_options") or {}),
            "quantization_methods": facts.get("quantization_methods"),
            "kv_cache_dtype_at_config": facts.get("kv_cache_dtype_at_config"),
            "kv_cache_dtype_parser_choices": ((facts.get("parser_options") or {})
                                              .get("kv_cache_dtype") or {}).get("choices"),
            "cases": target["cases"],
        }
        if "probe_error" in facts:
            entry["probe_error"] = facts["probe_error"][-ERROR_CHARS:]
        out["targets"][label] = entry
    for d, r in pairs_of(targets):
        out["double_vs_real"][f"{d} vs {r}"] = dict(compare_pair(targets[d], targets[r]),
                                                    double=d, real=r)
    Path(opts.json).write_text(json.dumps(out, indent=1) + "\n")
    Path(opts.md).write_text(render_md(out))
    return 0


def verdict(case):
    if case["accepted"]:
        return "accepted"
    return "refused" if case["exit"] == 2 else "could not run"


def median_seconds(target):
    return statistics.median(c["seconds"] for c in target["cases"].values())


def render_md(out):
    t = out["targets"]
    reals = [label for label, x in t.items() if x["kind"] == "real"]
    doubles = [label for label, x in t.items() if x["kind"] == "double"]
    labels = reals + doubles
    pairs = out["double_vs_real"]
    lines = [
        "# vLLM's own `vllm serve` parser against files/vllm_flags_check.py",
        "",
        "One-off measurement (`bench/vllm_parsers/run.sh`): the check run with the Python of real "
        "vLLM installs (pip, CPU machine, no GPU) and with the project's vLLM double "
        "(PYTHONPATH on a copy of molecule/images/vllm-double/src, laid out per release with its "
        "layout.py). Raw data: `vllm-parsers.json`. "
        f"Measured {out['measured_at']} on {out['host']['cpus']} shared CPUs "
        "(other jobs running: seconds are indicative).",
        "",
        "Each cell: accepted/refused (exit code), seconds of the one-off check process "
        "(python start, vLLM import, parser build, parse, validate, the --quantization list, "
        "vllm.config.CacheConfig(cache_dtype=...)). Expected: what the role "
        "relies on. Last column: the double against the real release of the same version.",
        "",
        "| case | expected | " + " | ".join(labels) + " | double agrees |",
        "| --- | --- | " + " | ".join("---" for _ in labels) + " | --- |",
    ]
    for name, case in out["cases"].items():
        cells = []
        for label in labels:
            c = t[label]["cases"].get(name)
            cells.append("-" if c is None else
                         f"{verdict(c)} ({c['exit']}), {c['seconds']:.2f} s"
                         + ("" if c["as_expected"] else " **unexpected**"))
        agree = ", ".join(
            f"{p['real']}: " + ("yes" if p["cases"].get(name, {}).get("agree") else "**NO**")
            for p in pairs.values()) or "-"
        lines.append(f"| {case['label']} | {case['expected']} | " + " | ".join(cells)
                     + f" | {agree} |")
    lines += ["", "Messages (the check's `error`, shortened here; 300 characters in the JSON):",
              "", "| case | " + " | ".join(labels) + " |",
              "| --- | " + " | ".join("---" for _ in labels) + " |"]
    for name, case in out["cases"].items():
        cells = [short(t[label]["cases"].get(name, {}).get("error")) or "-" for label in labels]
        lines.append(f"| {case['label']} | " + " | ".join(cells) + " |")

    def install(key, fmt=str):
        return lambda x: fmt(x["install"][key]) if x["install"] else "-"

    rows = [
        ("vllm version", lambda x: x["vllm_version"]),
        ("parser module", lambda x: f"`{x['parser_module']}`"),
        ("python", lambda x: x["python"]),
        ("torch", lambda x: x["torch"] or "-"),
        ("torchvision / torchaudio", lambda x: f"{x['torchvision'] or '-'} / "
                                                f"{x['torchaudio'] or '-'}"),
        ("flashinfer-python", lambda x: x["flashinfer_python"] or "-"),
        ("platform", lambda x: x["platform"]),
        ("serve parser options", lambda x: x["parser_option_count"]),
        ("quantization methods", lambda x: len(x["quantization_methods"])
            if isinstance(x["quantization_methods"], list) else x["quantization_methods"]),
        ("install: seconds", install("seconds")),
        ("install: venv size", install("venv_bytes", fmt_bytes)),
        ("install: torch", install("torch_request")),
        ("install: packages from local disk / index",
         install("pip_packages", lambda p: f"{p['local disk']} / {p['package index']}")),
        ("install: removed so the parser loads",
         install("removed", lambda r: ", ".join(r) or "none")),
    ]
    lines += ["", "## What ran", "", "| | " + " | ".join(labels) + " |",
              "| --- | " + " | ".join("---" for _ in labels) + " |"]
    for title, get in rows:
        lines.append(f"| {title} | " + " | ".join(short(str(get(t[label])), 160)
                                                  for label in labels) + " |")
    for label in reals:
        removed = (t[label]["install"] or {}).get("removed") or {}
        if removed:
            lines.append("")
            lines.append(f"{label}, uninstalled because they did not import: " + "; ".join(
                f"{k}: `{v}`" for k, v in removed.items()))
    for label in doubles:
        about = t[label]["about"]
        if about:
            lines.append("")
            lines.append(f"{label}: " + "; ".join(f"{k} {v}" for k, v in about.items()))

    lines += ["", "## Timings (figures, not verdicts)", ""]
    for label in labels:
        x = t[label]
        secs = [c["seconds"] for c in x["cases"].values()]
        warm = [c["warm_check_seconds"] for c in x["cases"].values()
                if c.get("warm_check_seconds") is not None]
        text = (f"- {label}: one-off check process median {statistics.median(secs):.2f} s "
                f"(min {min(secs):.2f}, max {max(secs):.2f}, {len(secs)} cases; the untimed "
                f"warm-up before them took {x['warmup_check']['seconds']:.2f} s)")
        if warm:
            first = x["first_check_in_process"] or {}
            text += (f"; in one process: first check() {first.get('seconds', 0):.2f} s "
                     f"(imports), then per case median {statistics.median(warm):.3f} s "
                     f"(parser build + parse + validate; parser build alone "
                     f"{x['parser_build_seconds']:.3f} s)")
        lines.append(text)
    for p in pairs.values():
        ratio = median_seconds(t[p["real"]]) / median_seconds(t[p["double"]])
        lines.append(f"- one-off check, {p['real']} / {p['double']}: {ratio:.1f}x")
    if len(reals) > 1:
        a, b = reals[0], reals[-1]
        lines.append(f"- one-off check, {b} / {a}: "
                     f"{median_seconds(t[b]) / median_seconds(t[a]):.2f}x")
        ia, ib = t[a]["install"], t[b]["install"]
        if ia and ib:
            lines.append(f"- install {b} / {a}: time {ib['seconds'] / ia['seconds']:.2f}x, "
                         f"venv size {ib['venv_bytes'] / ia['venv_bytes']:.2f}x")

    lines += ["", "## `--kv-cache-dtype`: parser and engine config", ""]
    for label in labels:
        kv = t[label].get("kv_cache_dtype_at_config") or {}
        choices = t[label].get("kv_cache_dtype_parser_choices")
        parser = (f"parser: {len(choices)} choices" if isinstance(choices, list)
                  else "parser: any string")
        if "error" in kv:
            lines.append(f"- {label}: {parser}; CacheConfig not importable: {kv['error']}")
            continue
        values = ", ".join(f"`{k}` {v}" for k, v in kv.items() if k != "CacheDType")
        literal = kv.get("CacheDType")
        lines.append(f"- {label}: {parser}; vllm.config.CacheConfig(cache_dtype=...) (built when "
                     f"the engine starts): {values}; CacheDType has "
                     + (f"{len(literal)} names" if isinstance(literal, list) else str(literal)))

    lines += ["", "## Double against the real release", ""]
    for key, p in pairs.items():
        lines += [f"### {key}", ""]
        bad = [n for n, c in p["cases"].items() if not c["agree"]]
        lines.append("- accept/refuse: " + ("the same on every case" if not bad else
                                            "DIFFERENT on " + ", ".join(bad)))
        lines.append(f"- version string: double {p['version_string']['double']}, real "
                     f"{p['version_string']['real']}; parser module: double "
                     f"`{p['parser_module']['double']}`, real `{p['parser_module']['real']}`")
        q = p["quantization_methods"]
        if q:
            lines.append(f"- quantization list: double {q['double_count']} names, real "
                         f"{q['real_count']}; only in the double: "
                         f"{', '.join(q['only_in_double']) or 'none'}; only in real: "
                         f"{', '.join(q['only_in_real']) or 'none'}; common names in the same "
                         f"order: {'yes' if q['same_order'] else 'no'}")
        cc = p.get("cache_config") or {}
        if cc.get("names"):
            n = cc["names"]
            lines.append(
                f"- vllm.config.CacheConfig: CacheDType double {n['double_count']} names, real "
                f"{n['real_count']}, " + ("the same list in the same order" if n["same_list"]
                                          else f"only in the double: "
                                          f"{', '.join(n['only_in_double']) or 'none'}; only in "
                                          f"real: {', '.join(n['only_in_real']) or 'none'}")
                + "; cache_dtype " + ", ".join(
                    f"`{v}` {x['double']}" + ("" if x["agree"] else f" (real: {x['real']})")
                    for v, x in cc["values"].items())
                + (" (as the real one)" if cc["all_values_agree"] else " **differs**"))
        elif cc:
            lines.append(f"- vllm.config.CacheConfig: not compared: {short(json.dumps(cc), 300)}")
        shown = [f for f in p["flag_differences"] if f["direction"] != "info"]
        if not shown:
            lines.append("- serve flags: every option string of the double exists in the real "
                         "parser, with the same value kind, nargs and choices")
        for f in shown:
            lines.append(f"- **{f['direction']}**: `{f['flag']}`: {f['what']}: "
                         f"{short(json.dumps(f['detail']), 400)}")
        info = [f for f in p["flag_differences"] if f["direction"] == "info"]
        if info:
            lines.append(f"- information only ({len(info)}): " + "; ".join(
                f"`{f['flag']}` {f['what']} {short(json.dumps(f['detail']), 120)}"
                for f in info))
        lines.append("")

    lines += ["## Commands", "", "```"] + out["commands"] + ["```", ""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("cases")
    p.add_argument("--reference", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("run")
    p.add_argument("--label", required=True)
    p.add_argument("--python", required=True)
    p.add_argument("--pythonpath")
    p.add_argument("--install")
    p.add_argument("--about", nargs="*", default=[], help="KEY=VALUE notes kept with the target")
    p.add_argument("--cases", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("record-install")
    p.add_argument("--venv", required=True)
    p.add_argument("--version", required=True)
    p.add_argument("--seconds", required=True)
    p.add_argument("--torch-request", required=True)
    p.add_argument("--pip-report")
    p.add_argument("--pip-config", help="a file: `pip --version` and `pip config list`")
    p.add_argument("--out", required=True)
    p = sub.add_parser("report")
    p.add_argument("--work", required=True)
    p.add_argument("--json", required=True)
    p.add_argument("--md", required=True)
    opts = parser.parse_args(argv)
    return {"cases": cmd_cases, "run": cmd_run, "record-install": cmd_record_install,
            "report": cmd_report}[opts.command](opts)


if __name__ == "__main__":
    sys.exit(main())
