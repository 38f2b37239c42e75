"""SVG charts of the measured benchmarks, drawn from their JSON (``docs/data/*.json``) by the docs
build (``docs_build/hooks.py``); nothing here is drawn by hand.

- ``shapes-roofline.svg``: tok/s per model shape, plain transformers (static cache + compile)
  against intelrt, with the bandwidth roofline — the most tok/s the GPU's memory bandwidth allows
  a step that reads the shape's weights (``intelrt bench --shape``'s JSON);
- ``batch-scaling.svg``: tok/s at batch 1 and at 64 prompts, each run of ``intelrt bench``;
- ``serve-throughput.svg`` and ``serve-latency.svg``: total tok/s and time to the first token p50
  against concurrency, ``intelrt serve`` against both ``transformers serve`` modes
  (``benchmarks/bench_serve.py --results``'s JSON).

``python docs_build/charts.py OUT_DIR`` writes them without building the site.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "docs" / "data"
INTELRT, PLAIN, OTHER, ROOF = "#0068b5", "#9aa4ad", "#e8a33d", "#2e2e2e"
"""intelrt in Intel blue, plain transformers in grey, the second transformers mode in amber."""


def _figure(width: float, height: float) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "intelrt-docs",  # text as text; stable ids
                         "font.family": "sans-serif", "font.size": 10, "axes.spines.top": False,
                         "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3})
    return plt.subplots(figsize=(width, height))


def _svg(fig: Any) -> str:
    import matplotlib.pyplot as plt

    out = io.StringIO()
    fig.tight_layout()
    fig.savefig(out, format="svg", metadata={"Date": None, "Creator": "intelrt docs build (matplotlib)"})
    plt.close(fig)
    return out.getvalue()


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / name).read_text(encoding="utf-8"))
    return data


def shapes_roofline(data: dict[str, Any]) -> str:
    """Grouped horizontal bars per shape (log scale), the roofline as a tick on each row."""
    rows = data["rows"]
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    by = {(r["shape"], r["run"]): r for r in rows}
    fig, ax = _figure(8.0, 0.42 * len(shapes) + 1.8)
    for i, shape in enumerate(shapes):
        ours = by[(shape, "intelrt")]
        plain = next(r for (s, run), r in by.items() if s == shape and run != "intelrt")
        ax.barh(i - 0.2, plain["tok_s"], height=0.38, color=PLAIN, label="transformers, static cache + compile"
                if i == 0 else None)
        ax.barh(i + 0.2, ours["tok_s"], height=0.38, color=INTELRT, label="intelrt" if i == 0 else None)
        roof = ours["tok_s"] / ours["roofline"]  # tok/s at 100 % of the bandwidth roofline
        ax.plot([roof, roof], [i - 0.42, i + 0.42], color=ROOF, linewidth=2,
                label="roofline (memory bandwidth / weights read per token)" if i == 0 else None)
        ax.text(ours["tok_s"] * 1.04, i + 0.2, f"{ours['tok_s']:,.0f}  ({ours['roofline']:.0%})", va="center",
                fontsize=8, color=INTELRT)
    ax.set_yticks(range(len(shapes)), shapes)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("tokens per second, batch 1 (log scale); in brackets: share of the roofline")
    ax.set_title(f"Decode speed per model shape on an {data['device']} ({data['measured']})", loc="left")
    ax.legend(loc="upper center", bbox_to_anchor=(0.45, -0.16), ncol=3, fontsize=8, frameon=False)
    return _svg(fig)


def batch_scaling(data: dict[str, Any]) -> str:
    """tok/s of every run at batch 1 and at the many-prompt batch, on a log scale."""
    rows = [r for r in data["rows"] if r["tok_s"]]
    groups = list(dict.fromkeys(r["group"] for r in rows))
    fig, ax = _figure(8.0, 3.6)
    labels, values, colors = [], [], []
    for group in groups:
        for r in (r for r in rows if r["group"] == group):
            labels.append(f"{group}: {r['name']}")
            values.append(r["tok_s"])
            colors.append(INTELRT if r["name"] == "intelrt" else PLAIN)
    ax.barh(labels, values, color=colors)
    for i, value in enumerate(values):
        ax.text(value * 1.05, i, f"{value:,.0f}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("tokens per second (log scale)")
    ax.set_title(f"One prompt and 64 at once: {data['model']} on an {data.get('gpu', data['device'])}", loc="left")
    return _svg(fig)


def _serve_lines(data: dict[str, Any], value: Callable[[dict[str, Any]], float | None], ylabel: str,
                 title: str, log: bool) -> str:
    cells = data["cells"]
    servers = list(dict.fromkeys(c["server"] for c in cells))
    style = {"intelrt": (INTELRT, "intelrt serve"), "transformers": (PLAIN, "transformers serve"),
             "transformers-cb": (OTHER, "transformers serve --continuous-batching")}
    fig, ax = _figure(6.4, 3.6)
    for server in servers:
        points = sorted((c["concurrency"], value(c)) for c in cells if c["server"] == server)
        xs = [x for x, y in points if y is not None]
        ys = [y for _, y in points if y is not None]
        color, label = style.get(server, (ROOF, server))
        ax.plot(xs, ys, marker="o", color=color, label=label, linewidth=2)
        for x, y in zip(xs, ys, strict=True):
            ax.annotate(f"{y:,.0f}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8, color=color)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({c["concurrency"] for c in cells}), [str(c) for c in sorted({c["concurrency"]
                                                                                      for c in cells})])
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("concurrent clients (streamed /v1/completions)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, loc="left")
    ax.legend(fontsize=8, frameon=False)
    return _svg(fig)


def serve_throughput(data: dict[str, Any]) -> str:
    return _serve_lines(data, lambda c: c.get("tok_s") or (c["tokens"] / c["seconds"] if c.get("seconds") else None),
                        "generated tokens per second, all clients", f"Serving throughput on an {data['gpu']}",
                        log=True)


def serve_latency(data: dict[str, Any]) -> str:
    return _serve_lines(data, lambda c: None if c["ttft_p50"] is None else c["ttft_p50"] * 1000,
                        "time to first token, p50 (ms, log scale)", f"Time to the first token on an {data['gpu']}",
                        log=True)


CHARTS: dict[str, tuple[str, Callable[[dict[str, Any]], str]]] = {
    "shapes-roofline.svg": ("shapes-h200.json", shapes_roofline),
    "batch-scaling.svg": ("generate-h200.json", batch_scaling),
    "serve-throughput.svg": ("serve-h200.json", serve_throughput),
    "serve-latency.svg": ("serve-h200.json", serve_latency),
}
"""Chart file → (its data file in docs/data, what draws it)."""


def render_all() -> dict[str, str]:
    """Every chart's SVG text, by file name."""
    return {name: draw(_load(source)) for name, (source, draw) in CHARTS.items()}


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "charts")
    out.mkdir(parents=True, exist_ok=True)
    for name, svg in render_all().items():
        (out / name).write_text(svg, encoding="utf-8")
        print(out / name)
