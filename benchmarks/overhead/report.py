"""The speed page (``overhead.md``) and its figures, rendered from the JSON record alone.
The page opens with its answer: the compare section's calls/s against Open_ES where the run
has it, else the compile section's latencies, else the dims section's figure."""

from __future__ import annotations

from pathlib import Path

from benchmarks import pages
from benchmarks import record as run_record
from benchmarks.overhead import protocol, torch_loop
from benchmarks.overhead.measure import IMPLS

REFERENCE = "open_es"  # the outside reference of the compare section
LOOP = torch_loop.NAME  # the hand-written PyTorch loop, when the run has it
LOOP_GOAL = 100.0  # calls/s against the PyTorch loop (issue 24)
FIXED_REFERENCE = "radazo"  # the per-call cost reference of the dims section
ADAPTIVE_GOAL, FIXED_GOAL = 1.0, 1.2  # calls/s against Open_ES at d = 100, 5 seeds
DIMS_GOAL = 1.1  # adaptive cost per call against R-AdaZO K=10 at d = 10^6


def _mib(n: float | None) -> str:
    return pages.num(None if n is None else n / 2**20, "{:,.2f}", "–")


def _round_loads(record: dict) -> str:
    loads = record.get("round_loads", {})
    return "".join(f"; load before each {name} round: {', '.join(map(str, x))}"
                   for name, x in loads.items() if x)


def _pinning(record: dict) -> str:
    """Which core the run was pinned to and how busy the cores were just before."""
    busy = record.get("busy_before_pinning")
    if not busy or record["pinned_cores"] != 1:
        return ""
    shares = ", ".join(f"core {c} {100 * x:.0f}%" for c, x in busy.items())
    return f" (core {record['cores'][0]}, the least busy one just before: {shares})"


def _verdict(text: str, met: bool) -> str:
    return f"{text}: {'met' if met else 'not met'}."


VS_OPEN_ES, VS_FIXED, VS_LOOP = "calls/s vs Open_ES", "cost/call vs R-AdaZO K=10", "loop"


def rate_ratio(r: dict, ref: dict, paired: bool = False) -> float:
    """``r``'s useful calls/s over ``ref``'s: of their minimum times, or ``paired`` round by
    round (:func:`benchmarks.overhead.protocol.round_ratio`) on the record's clock."""
    times = "cpu_seconds_all" if r.get("clock") == "cpu" else "run_seconds_all"
    if not paired or times not in r or times not in ref:  # or a record without its rounds
        return r["calls_per_second"] / ref["calls_per_second"]
    return r["useful_calls"] / ref["useful_calls"] * protocol.round_ratio(ref[times], r[times])


def _ratios(records: list[dict], references: tuple, group, paired: bool) -> dict:
    """``(*group(r), method, ratio) -> value`` for every record ``r`` and every
    ``(reference, name, invert)`` in ``references`` present in ``r``'s group (a method
    against itself left out); ``invert`` states a cost ratio (µs/call) for a rate ratio."""
    by = {(group(r), r["method"]): r for r in records}
    out = {}
    for r in records:
        for ref, name, invert in references:
            base = by.get((group(r), ref))
            if base is not None and ref != r["method"]:
                ratio = rate_ratio(r, base, paired)
                out[(*group(r), r["method"], name)] = 1 / ratio if invert else ratio
    return out


def compare_ratios(records: list[dict], paired: bool = False) -> dict[tuple[str, str], float]:
    """``(method, ratio) -> value``: the ratios the compare section states (calls/s over
    Open_ES's, µs/call over R-AdaZO K=10's, calls/s over the PyTorch loop's; a method
    against itself left out)."""
    references = ((REFERENCE, VS_OPEN_ES, False), (FIXED_REFERENCE, VS_FIXED, True),
                  (LOOP, VS_LOOP, False))
    return _ratios(records, references, lambda r: (), paired)


def dims_ratios(records: list[dict], paired: bool = False) -> dict[tuple[int, str, str], float]:
    """``(d, method, ratio) -> value``: µs/call over R-AdaZO K=10's and calls/s over
    Open_ES's at the same d."""
    references = ((FIXED_REFERENCE, VS_FIXED, True), (REFERENCE, VS_OPEN_ES, False))
    return _ratios(records, references, lambda r: (r["d"],), paired)


PREVIOUS = {"(previous run)": "the same ratio in the previous run of the same command "
                             "(`--previous`)"}


def _cells(now: dict, before: dict | None, key, fmt: str = "{:.2f}") -> list[str]:
    """A ratio of this run and, with a previous run, the previous run's."""
    return [pages.num(x.get(key), fmt, "–") for x in (now, before) if x is not None]


def _heads(names: list[str], before: dict | None) -> list[str]:
    return [h for n in names for h in (n, f"{n} (previous run)")[:1 + (before is not None)]]


PAIRED = ("ratios paired round by round (the median over rounds of the ratio within a "
          "round, not shown in the table)")


def _repeatability(now: dict, before: dict | None, name, ratios=None, records=None,
                   what: str = "ratios") -> list[str]:
    """The repeatability sentence of two runs' ratios (``name``: a ratio's key in words;
    ``what``: the ratios in words); with ``ratios`` (the section's function) and
    ``records`` (this run's and the previous run's), also of the ratios paired round by
    round."""
    differences = protocol.ratio_differences(now, before or {})
    if not differences:
        return []
    out = [protocol.repeatability(differences, lambda k: name(*k), what)]
    if ratios is not None:
        paired = protocol.ratio_differences(*(ratios(r, paired=True) for r in records))
        out.append(protocol.repeatability(paired, lambda k: name(*k), PAIRED))
    return out


def compare(s: dict, p: dict, previous: dict | None = None) -> list[str]:
    records = s["compare"]
    now = compare_ratios(records)
    before = compare_ratios(previous["compare"]) if previous and previous.get("compare") \
        else None
    rows, verdicts = [], []
    for r in records:
        key = r["method"]
        rows.append([
            r["label"], r["kind"], f"{r['calls_per_second']:,.0f}", f"{r['us_per_call']:.3f}",
            *_cells(now, before, (key, VS_OPEN_ES)), *_cells(now, before, (key, VS_FIXED)),
            f"{r['steps']:,}", f"{r['useful_calls'] / r['steps'] / r['seeds']:.1f}",
            f"{r['lane_use']:.2f}", pages.mean_std(r["final_gap"]), f"{r['compile_seconds']:.1f}"])
        if r["kind"] not in ("fixed", "adaptive"):
            continue
        if (key, VS_OPEN_ES) in now:
            goal, vs = FIXED_GOAL if r["kind"] == "fixed" else ADAPTIVE_GOAL, now[key, VS_OPEN_ES]
            verdicts.append(_verdict(
                f"{r['label']}: {vs:.2f}x Open_ES calls/s (goal ≥ {goal}x)", vs >= goal))
        if (key, VS_LOOP) in now:
            vs = now[key, VS_LOOP]
            verdicts.append(_verdict(f"{r['label']}: {vs:,.0f}x the PyTorch loop's calls/s (the "
                                     f"loop on one CPU thread; goal ≥ {LOOP_GOAL:.0f}x)",
                                     vs >= LOOP_GOAL))
    seeds = p["compare_seeds"]
    return [(f"## Compare: quadratic, d = {p['compare_dim']:,}, "
             f"{seeds if isinstance(seeds, int) else len(seeds)} vmapped seeds, "
             f"{p['compare_calls']:,} oracle calls per seed"), pages.columns({
        "kind": "fixed K, adaptive K, or an outside reference",
        "useful calls/s, µs/call": "oracle calls the methods' ledgers count (all seeds) per "
                                   "second of run time, and its inverse",
        "calls/s vs Open_ES": "useful calls/s over Open_ES's",
        "cost/call vs R-AdaZO K=10": "µs/call over R-AdaZO K=10's",
        **(PREVIOUS if before else {}),
        "steps": "while-loop steps until every seed spent its calls",
        "calls/step/seed": "useful calls / steps / seeds",
        "lane use": "useful over executed direction evaluations (under vmap a step runs "
                    "until its slowest seed accepts)",
        "final gap": "f(x_T) - f* at the end of the run",
        "compile s": "compilation of the run"}), pages.table(
        ["method", "kind", "useful calls/s", "µs/call", *_heads([VS_OPEN_ES, VS_FIXED], before),
         "steps", "calls/step/seed", "lane use", "final gap (mean ± std over seeds)",
         "compile s"], rows),
        *_repeatability(now, before, lambda m, ratio: f"{m}, {ratio}", compare_ratios,
                        (records, previous and previous.get("compare"))),
        pages.bullets(verdicts)]


def dims(s: dict, p: dict, previous: dict | None = None) -> list[str]:
    records, parts = s["dims"], s.get("parts", [])
    now = dims_ratios(records)
    before = dims_ratios(previous["dims"]) if previous and previous.get("dims") else None
    largest = max((r["d"] for r in records if r["method"] == FIXED_REFERENCE), default=None)
    rows, verdicts = [], []
    for r in records:
        fixed, outside = ((r["d"], r["method"], name) for name in (VS_FIXED, VS_OPEN_ES))
        rows.append([f"{r['d']:,}", r["label"], f"{r['steps']:,}", f"{r['us_per_call']:,.3f}",
                     *_cells(now, before, fixed), *_cells(now, before, outside),
                     _mib(r["state_bytes_per_seed"]),
                     _mib(r["memory"].get("temp_size_in_bytes"))])
        if r["kind"] == "fixed" and outside in now:
            vs = now[outside]
            verdicts.append(_verdict(f"{r['label']} at d = {r['d']:,}: {vs:.2f}x Open_ES "
                                     "calls/s (goal ≥ 1.0x)", vs >= 1.0))
        if r["kind"] == "adaptive" and r["d"] == largest and fixed in now:
            ratio = now[fixed]
            verdicts.append(_verdict(f"{r['label']} at d = {r['d']:,}: {ratio:.2f}x R-AdaZO "
                                     f"K=10 per call (goal ≤ {DIMS_GOAL}x)", ratio <= DIMS_GOAL))
    impls = [i for i in IMPLS if all(f"alone_{i}" in q for q in parts)]
    prow = [[f"{q['d']:,}", f"{q['draw'] / 10:,.3f}",
             *(f"{q[f'alone_{i}']:,.3f}" for i in impls), f"{q['evaluate'] / 20:,.3f}",
             f"{q['empty']:,.3f}"] for q in parts]
    return ["## Per-call cost against d (quadratic, one seed)", pages.columns({
        "µs/call": "run time over the useful oracle calls",
        "cost/call vs R-AdaZO K=10": "µs/call over R-AdaZO K=10's at the same d",
        "calls/s vs Open_ES": "useful calls/s over Open_ES's at the same d",
        **(PREVIOUS if before else {}),
        "state MiB/seed": "one seed's optimizer state",
        "XLA temp MiB": "the compiled run's temporary buffers (XLA's memory analysis)"}),
        pages.table(["d", "method", "steps", "µs/call", *_heads([VS_FIXED, VS_OPEN_ES], before),
                     "state MiB/seed", "XLA temp MiB"], rows),
        *_repeatability(now, before, lambda d, m, ratio: f"{m} at d = {d:,}, {ratio}",
                        dims_ratios, (records, previous and previous.get("dims"))),
        "Parts of a step (one seed):", pages.table(
            ["d", "µs per Gaussian direction (batch of 10)",
             *(f"µs per direction drawn alone, {i} keys" for i in impls),
             "µs per objective call (batch of 20)", "µs per empty scanned step"], prow),
        pages.bullets(verdicts)]


def seeds(s: dict, p: dict, previous: dict | None = None) -> list[str]:
    """The seed sweep (no ratios: ``previous`` is not used)."""
    records, parts = s["seeds"], s.get("seeds_parts", [])
    rows = [[f"{r['seeds']:,}", r["label"], f"{r['calls_per_second']:,.0f}",
             f"{r['us_per_call']:.3f}", f"{r['lane_use']:.2f}", f"{r['wasted_fraction']:.2f}",
             f"{r['state_bytes_per_seed']:,}", _mib(r["memory"].get("temp_size_in_bytes")),
             _mib(r["memory"].get("argument_size_in_bytes")), f"{r['run_seconds']:.2f}"]
            for r in records]
    return [f"## Seed sweep: quadratic, d = {p['seeds_dim']:,}, {p['seeds_calls']:,} oracle "
            "calls per seed", pages.columns({
        "seeds": "vmapped seeds, one lane each",
        "useful calls/s, µs/call, lane use": "as under Compare",
        "wasted evaluations": "1 - lane use: the share of objective evaluations computed and "
                              "discarded",
        "state bytes/seed": "one seed's optimizer state",
        "XLA temp MiB, XLA arguments MiB": "the compiled run's temporary and argument "
                                           "buffers (XLA's memory analysis)",
        "run s": "run time (the statistic of the header line), compilation excluded"}), pages.table(
        ["seeds", "method", "useful calls/s", "µs/call", "lane use", "wasted evaluations",
         "state bytes/seed", "XLA temp MiB", "XLA arguments MiB", "run s"], rows),
        f"Parts of a step at d = {records[0]['d']:,}, per seed:", pages.table(
            ["seeds", "µs per direction drawn", "µs per objective call", "µs per empty step"],
            [[f"{q['seeds']:,}", f"{q['draw'] / 10 / q['seeds']:,.4f}",
              f"{q['evaluate'] / 20 / q['seeds']:,.4f}", f"{q['empty']:,.2f}"] for q in parts])]


def compile_latency(s: dict, p: dict, previous: dict | None = None) -> list[str]:
    """The compile section: median and minimum CPU seconds per program, ratios to the
    references and shares of a round (paired within a round, the median over rounds), the
    targets on the median, and (with ``previous``, an earlier run's section) both runs'
    ratios with their largest differences, one sentence per ratio."""
    from benchmarks.overhead import compile as c

    section, now = s["compile"], c.ratios(s["compile"])
    before = c.ratios(previous) if previous else None
    refs = [ref for ref in (*c.REFERENCES, c.ROUND) if any(k[2] == ref for k in now)]
    # per reference: its column's head, its number format, its ratios in words
    kinds = {ref: ("share of round", "{:.1%}", "shares of a round") if ref == c.ROUND
             else (f"÷ {ref}", "{:.2f}", f"ratios ÷ {ref}") for ref in refs}
    rows, verdicts = [], []
    for r in section["rows"]:
        key, target, median = (r["method"], r["d"]), c.TARGETS.get(r["method"], c.TARGET), \
            c.median_cpu(r)
        ratio = [cell for ref in refs for cell in _cells(now, before, key + (ref,),
                                                         kinds[ref][1])]
        rows.append([f"{r['d']:,}", r["method"], f"{median:.2f}", f"{min(c.cpu_rounds(r)):.2f}",
                     f"{min(r['seconds_all']):.2f}", *ratio,
                     *(pages.num(r.get(k), "{:,}", "–") for k in ("fusions", "whiles",
                                                                   "instructions")),
                     " ".join(f"{x:.2f}" for x in c.cpu_rounds(r))])
        if r["method"] in c.ALIASES:
            verdicts.append(_verdict(f"{r['method']}, d = {r['d']:,}: {median:.2f} CPU s, "
                                     f"median of {len(c.cpu_rounds(r))} rounds (target ≤ "
                                     f"{target} s on an idle core)", median <= target))
    heads = _heads([head for head, _, _ in kinds.values()], before)
    loads = ", ".join(str(x) for x in section["loads"])
    out = [f"## Compile latency: first call of each jitted step, {section['rounds']} "
           "interleaved rounds", pages.columns({
        "CPU s, min": "tracing, lowering and XLA compilation, the process's CPU time, the "
                      "median over rounds (the targets' statistic: what a user typically "
                      "meets) and the minimum (the luckiest round), caches cleared before each",
        "wall s": "the same, wall time, the minimum (equal to the CPU time on an idle "
                  "pinned core)",
        "÷ adam, ÷ open_es": "CPU s over optax.adam's step (exact gradient) and evosax "
                             "Open_ES's step, measured in the same round, the median over "
                             "rounds of that ratio",
        "share of round": "CPU s over the round's total of every program at that d, the "
                          "median over rounds",
        "fusions, whiles, instructions": "kernels, while loops and HLO instructions of the "
                                         "compiled program",
        "CPU s of every round": "in the order of the rounds"}), pages.table(
        ["d", "program", "CPU s", "min", "wall s", *heads, "fusions", "whiles",
         "instructions", "CPU s of every round"], rows),
        f"XLA_FLAGS: `{section['xla_flags'] or '(none: defaults)'}`; persistent cache: "
        f"{section['persistent_cache'] or 'off'}; load average before each round: {loads}."]
    for ref in refs if before else ():
        out += _repeatability({k: v for k, v in now.items() if k[2] == ref}, before,
                              lambda m, d, _: f"{m} at d = {d:,}", what=kinds[ref][2])
    return out + [pages.bullets(verdicts)]


SECTIONS = {"compare": compare, "dims": dims, "seeds": seeds}  # the page's, in order


def _lines(rows: list[dict], x: str, y: str) -> list[tuple]:
    """One line per method of ``rows``: ``y`` against ``x``, dots at the measurements."""
    return [([r[x] for r in rows if r["label"] == label],
             [r[y] for r in rows if r["label"] == label], label, {"marker": "o"})
            for label in dict.fromkeys(r["label"] for r in rows)]


def figures(s: dict, folder: Path) -> list[Path]:
    out = []
    if s.get("seeds"):
        out.append(pages.curves(folder / "seeds.png", [
            ("", _lines(s["seeds"], "seeds", "calls_per_second"),
             {"yscale": "log", "ylabel": "useful oracle calls / s"}),
            ("", _lines(s["seeds"], "seeds", "lane_use"), {"ylabel": "lane use"})],
            size=(5, 4), legend=(1, 7), grid=False, xlabel="vmapped seeds"))
    if s.get("dims"):
        out.append(pages.curves(
            folder / "dims.png", [("", _lines(s["dims"], "d", "us_per_call"), {})],
            size=(6, 4), grid=False, xlabel="d", yscale="log",
            ylabel="µs per useful oracle call (1 seed)"))
    return out


def _answer_compare(s: dict, p: dict) -> tuple[str, str]:
    records, now = s["compare"], compare_ratios(s["compare"])
    loop = any(r["method"] == LOOP for r in records)
    seeds = p["compare_seeds"]
    lanes = seeds if isinstance(seeds, int) else len(seeds)
    question = (f"How many oracle calls per second does each method make on a d = "
                f"{p['compare_dim']:,} quadratic with {lanes} vmapped seeds, against evosax's "
                "Open_ES"
                f"{' and a hand-written PyTorch loop' if loop else ''}?")
    ratios = [VS_OPEN_ES, VS_FIXED, *([VS_LOOP] if loop else [])]
    rows = [[r["label"], r["kind"], f"{r['calls_per_second']:,.0f}",
             *(pages.num(now.get((r["method"], name)), "{:,.2f}", "–") for name in ratios)]
            for r in records]
    return question, pages.table(["method", "kind", "useful calls/s", VS_OPEN_ES, VS_FIXED,
                                  *(["calls/s vs the PyTorch loop"] if loop else [])], rows)


def _answer_compile(s: dict) -> tuple[str, str]:
    from benchmarks.overhead import compile as c

    section, now = s["compile"], c.ratios(s["compile"])
    dims_ = list(dict.fromkeys(r["d"] for r in section["rows"]))
    by = {(r["method"], r["d"]): r for r in section["rows"]}
    rows = [[m, *(pages.num(c.median_cpu(by[m, d]) if (m, d) in by else None, "{:.2f}", "–")
                  for d in dims_),
             *(pages.num(now.get((m, d, "adam")), "{:.2f}", "–") for d in dims_)]
            for m in dict.fromkeys(r["method"] for r in section["rows"])]
    question = ("How long does the first call of each alias's jitted step take (tracing and "
                "compilation, CPU seconds), against optax.adam's step and evosax's Open_ES?")
    return question, pages.table(
        ["program", *(f"CPU s, d = {d:,}" for d in dims_), *(f"÷ adam, d = {d:,}" for d in dims_)],
        rows) + "\n\n" + pages.columns({
            "CPU s": "the median over rounds, caches cleared before each (the section below "
                     "has the minimum, the wall time and every round)",
            "÷ adam": "over optax.adam's step in the same round, the median over rounds"})


def render(record: dict, path: Path, folder: Path, previous: dict | None = None) -> Path:
    """Writes the generated block of the report ``path`` and the figures under ``folder``
    (``previous``: an earlier record of the same command, whose ratios the compare, dims
    and compile sections show beside this run's, with the largest difference)."""
    path, s = Path(path), record["sections"]
    m, p = record["machine"], record["preset"]
    loads = ", ".join(f"{k.removeprefix('load_').replace('_', ' ')} {record[k]}"
                      for k in record if k.startswith("load_"))
    setup = []
    if record.get("record"):  # the harness's run record (start, wall time, versions)
        setup.append(run_record.run_line(run_record.RunRecord.from_dict(record["record"])))
    clock = {"cpu": " of the process's CPU time", "wall": " of wall time"}.get(
        record.get("clock", "wall"), "")
    timed = "" if not any(s.get(n) for n in SECTIONS) else (
        f" Run time excludes compilation; {record.get('statistic', 'median')}{clock} over "
        f"{p['repeats']} interleaved rounds (compare, dims), {max(1, p['repeats'] // 3)} "
        f"(seeds), order rotated each round{_round_loads(record)}.")
    setup.append(
        f"{run_record.machine_line(m)} {record['pinned_cores']} of the cores used"
        f"{_pinning(record)}. Load "
        f"average (1 min): {loads}. Peak RSS of the process: {record['peak_rss_mib']:,.0f} "
        f"MiB.{timed}")
    parts = []
    before = previous["sections"] if previous else None
    for name, section in SECTIONS.items():
        if s.get(name):
            parts += section(s, p, before)
    if s.get("compile"):
        parts += compile_latency(s, p, before and before.get("compile"))
    drawn = figures(s, Path(folder) / path.stem)
    if s.get("compare"):
        question, answer = _answer_compare(s, p)
    elif s.get("compile"):
        question, answer = _answer_compile(s)
    else:
        question = ("How does the cost of an oracle call grow with d, against R-AdaZO K=10 "
                    "and evosax's Open_ES (one seed, a quadratic)?")
        answer, drawn = f"![{drawn[-1].stem}]({pages.link(drawn[-1], path)})", drawn[:-1]
    parts += [f"![{x.stem}]({pages.link(x, path)})" for x in drawn]
    return pages.page(path, "Speed: oracle calls per second", question=question, answer=answer,
                      run=record["command"], setup="\n\n".join(setup), sections=parts,
                      command="overhead")
