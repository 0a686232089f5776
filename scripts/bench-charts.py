#!/usr/bin/env python3
"""SVG charts of `voxtral-tts bench --json` runs, for the docs.

    scripts/bench-charts.py --title TITLE OUT_PREFIX RUN.json [RUN.json ...]

writes OUT_PREFIX-per-frame.svg (each run's time per frame, by part, against the 80 ms a
frame of audio lasts) and, when the runs measured several batch sizes,
OUT_PREFIX-streams.svg (frames per second by the number of streams). A run is labelled by
its `label` key when it has one, else by its family, weights and kernel. Only the standard
library: the charts are plain SVG text, so a run of the script gives the same bytes.
"""

import argparse
import json
import sys
from html import escape

REAL_TIME_MS = 80.0
PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1"]
FONT = 'font-family="sans-serif" font-size="12"'


def label(run):
    if "label" in run:
        return run["label"]
    return f'{run.get("family", "?")} {run.get("weights", run.get("dtype", "?"))} ({run.get("kernel", run.get("device", "?"))})'


# The parts of a frame in the order they run; a part not named here comes after them.
PART_ORDER = ["backbone", "talker", "code_predictor", "gpt", "flow_head", "encoder", "decoder",
              "speech_decoder", "codec", "vocoder"]


def parts(run):
    """The parts of a frame's time, in the order they run (`total` left out)."""
    items = [(k, v) for k, v in run["ms_per_frame"].items() if k != "total"]
    rank = lambda k: PART_ORDER.index(k) if k in PART_ORDER else len(PART_ORDER)
    return sorted(items, key=lambda item: (rank(item[0]), item[0]))


def nice_ceiling(value):
    """The smallest 1, 2 or 5 times a power of ten that is at least `value`."""
    step = 1.0
    while step * 10 <= value:
        step *= 10
    for factor in (1, 2, 5, 10):
        if step * factor >= value:
            return step * factor
    return step * 10


def ticks(top, count=5):
    return [top * i / count for i in range(count + 1)]


def svg(width, height, body):
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">\n'
        f'<rect width="{width}" height="{height}" fill="white"/>\n{body}</svg>\n'
    )


def per_frame_chart(runs, title):
    names = []
    for run in runs:
        for name, _ in parts(run):
            if name not in names:
                names.append(name)
    colour = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}
    left, right, top, bar, gap = 260, 30, 50, 22, 10
    plot = 460
    height = top + len(runs) * (bar + gap) + 60
    width = left + plot + right
    most = max(max(run["ms_per_frame"]["total"] for run in runs), REAL_TIME_MS)
    scale_top = nice_ceiling(most)
    x = lambda ms: left + plot * ms / scale_top
    out = [f'<text x="{left}" y="20" {FONT} font-weight="bold">{escape(title)}</text>\n']
    for tick in ticks(scale_top):
        out.append(
            f'<line x1="{x(tick):.1f}" y1="{top - 5}" x2="{x(tick):.1f}" y2="{height - 50}" stroke="#ddd"/>'
            f'<text x="{x(tick):.1f}" y="{height - 35}" {FONT} text-anchor="middle">{tick:g}</text>\n'
        )
    out.append(
        f'<text x="{left + plot / 2}" y="{height - 15}" {FONT} text-anchor="middle">ms per frame (80 ms of audio)</text>\n'
    )
    for i, run in enumerate(runs):
        y = top + i * (bar + gap)
        out.append(
            f'<text x="{left - 8}" y="{y + bar * 0.7:.1f}" {FONT} text-anchor="end">{escape(label(run))}</text>\n'
        )
        start = 0.0
        for name, ms in parts(run):
            out.append(
                f'<rect x="{x(start):.1f}" y="{y}" width="{x(start + ms) - x(start):.1f}" height="{bar}" '
                f'fill="{colour[name]}"><title>{escape(name)}: {ms:.1f} ms</title></rect>\n'
            )
            start += ms
        total = run["ms_per_frame"]["total"]
        out.append(f'<text x="{x(total) + 4:.1f}" y="{y + bar * 0.7:.1f}" {FONT}>{total:.1f}</text>\n')
    out.append(
        f'<line x1="{x(REAL_TIME_MS):.1f}" y1="{top - 5}" x2="{x(REAL_TIME_MS):.1f}" y2="{height - 50}" '
        f'stroke="#c00" stroke-dasharray="4 3"/>'
        f'<text x="{x(REAL_TIME_MS) + 4:.1f}" y="{height - 53}" {FONT} fill="#c00">real time</text>\n'
    )
    legend_x = left
    for name in names:
        out.append(
            f'<rect x="{legend_x}" y="28" width="10" height="10" fill="{colour[name]}"/>'
            f'<text x="{legend_x + 14}" y="37" {FONT}>{escape(name.replace("_", " "))}</text>\n'
        )
        legend_x += 20 + 7 * len(name)
    return svg(width, height, "".join(out))


def streams_chart(runs, title):
    runs = [run for run in runs if len(run.get("batch", [])) > 1]
    if not runs:
        return None
    left, right, top, bottom = 60, 260, 40, 60
    plot_w, plot_h = 420, 260
    width, height = left + plot_w + right, top + plot_h + bottom
    streams = sorted({b["streams"] for run in runs for b in run["batch"]})
    most = nice_ceiling(max(b["frames_per_s"] for run in runs for b in run["batch"]))
    x = lambda s: left + plot_w * streams.index(s) / max(len(streams) - 1, 1)
    y = lambda fps: top + plot_h * (1 - fps / most)
    out = [f'<text x="{left}" y="20" {FONT} font-weight="bold">{escape(title)}</text>\n']
    for tick in ticks(most):
        out.append(
            f'<line x1="{left}" y1="{y(tick):.1f}" x2="{left + plot_w}" y2="{y(tick):.1f}" stroke="#ddd"/>'
            f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" {FONT} text-anchor="end">{tick:g}</text>\n'
        )
    for s in streams:
        out.append(f'<text x="{x(s):.1f}" y="{top + plot_h + 18}" {FONT} text-anchor="middle">{s}</text>\n')
    out.append(
        f'<text x="{left + plot_w / 2}" y="{height - 20}" {FONT} text-anchor="middle">streams decoded together</text>\n'
        f'<text x="14" y="{top + plot_h / 2}" {FONT} text-anchor="middle" '
        f'transform="rotate(-90 14 {top + plot_h / 2})">frames per second</text>\n'
    )
    for i, run in enumerate(runs):
        colour = PALETTE[i % len(PALETTE)]
        points = " ".join(f'{x(b["streams"]):.1f},{y(b["frames_per_s"]):.1f}' for b in run["batch"])
        out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>\n')
        for b in run["batch"]:
            out.append(
                f'<circle cx="{x(b["streams"]):.1f}" cy="{y(b["frames_per_s"]):.1f}" r="3" fill="{colour}">'
                f'<title>{b["streams"]} streams: {b["frames_per_s"]:.1f} frames/s</title></circle>\n'
            )
        ly = top + 10 + 18 * i
        out.append(
            f'<rect x="{left + plot_w + 15}" y="{ly - 9}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{left + plot_w + 30}" y="{ly}" {FONT}>{escape(label(run))}</text>\n'
        )
    return svg(width, height, "".join(out))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--title", required=True, help="what the runs measured")
    parser.add_argument("prefix", help="the charts are PREFIX-per-frame.svg and PREFIX-streams.svg")
    parser.add_argument("runs", nargs="+", help="files written by bench --json")
    args = parser.parse_args()
    runs = []
    for path in args.runs:
        try:
            with open(path) as f:
                run = json.load(f)
            run["ms_per_frame"]["total"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"{path}: not a bench --json report ({e})")
        runs.append(run)
    with open(f"{args.prefix}-per-frame.svg", "w") as f:
        f.write(per_frame_chart(runs, f"{args.title}: time per frame"))
    chart = streams_chart(runs, f"{args.title}: several streams")
    if chart:
        with open(f"{args.prefix}-streams.svg", "w") as f:
            f.write(chart)


if __name__ == "__main__":
    main()
