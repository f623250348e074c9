"""The findings' learning-rate figure, shared by the table scripts (scripts/findings_*_tables.py):
panels side by side, each a set of lines of final val loss (or any loss) against the learning
rate on a log2 axis, a dot at each line's lowest point, a legend on the right.

    lr_panels(path, [(title, {label: [(lr, loss or None), ...]}), ...], labels, xlabel)

Points with None (a diverged or missing run) are left out of their line. Colours follow `labels`.
"""
import math
import pathlib

COLORS = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#d55e00", "#56b4e9", "#000000"]


def lr_panels(path, panels, labels, xlabel, ylabel="final val loss", span=1.2, W=460, H=320):
    pts = [(lr, v) for _, lines in panels for line in lines.values() for lr, v in line
           if v is not None]
    if not pts:
        return
    M = 55
    lx = [math.log2(lr) for lr, _ in pts]
    x0, x1 = min(lx) - 0.3, max(lx) + 0.3
    lo = min(v for _, v in pts)
    y0, y1 = lo - 0.05, min(max(v for _, v in pts), lo + span) + 0.05
    width = len(panels) * W + 170
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{H + 40}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{H + 40}" fill="white"/>']
    for k, (title, lines) in enumerate(panels):
        ox = k * W
        sx = lambda x: ox + M + (x - x0) / (x1 - x0) * (W - M - 15)  # noqa: E731
        sy = lambda y: 30 + (y1 - min(y, y1)) / (y1 - y0) * (H - 70)  # noqa: E731
        out.append(f'<text x="{ox + W / 2}" y="18" text-anchor="middle" font-weight="bold">'
                   f'{title}</text>')
        out.append(f'<rect x="{ox + M}" y="30" width="{W - M - 15}" height="{H - 70}" fill="none" '
                   'stroke="#888"/>')
        for e in range(math.ceil(x0), math.floor(x1) + 1):
            if e % 2 == 0 or x1 - x0 < 8:
                out.append(f'<text x="{sx(e):.1f}" y="{H - 25}" text-anchor="middle">'
                           f'{2.0 ** e:.2g}</text>')
                out.append(f'<line x1="{sx(e):.1f}" x2="{sx(e):.1f}" y1="30" y2="{H - 40}" '
                           'stroke="#eee"/>')
        step = 0.2 if y1 - y0 <= 2.5 else 0.5
        t = math.ceil(y0 / step) * step
        while t <= y1:
            out.append(f'<text x="{ox + M - 5}" y="{sy(t) + 4:.1f}" text-anchor="end">{t:.1f}</text>')
            out.append(f'<line x1="{ox + M}" x2="{ox + W - 15}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" '
                       'stroke="#eee"/>')
            t += step
        out.append(f'<text x="{ox + W / 2}" y="{H - 8}" text-anchor="middle">{xlabel}</text>')
        for i, label in enumerate(labels):
            line = [(math.log2(lr), v) for lr, v in lines.get(label, []) if v is not None]
            if not line:
                continue
            col = COLORS[i % len(COLORS)]
            path_d = " ".join(f"{'M' if j == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}"
                              for j, (x, y) in enumerate(line))
            out.append(f'<path d="{path_d}" fill="none" stroke="{col}" stroke-width="2"/>')
            bx, by = min(line, key=lambda p: p[1])
            out.append(f'<circle cx="{sx(bx):.1f}" cy="{sy(by):.1f}" r="4" fill="{col}"/>')
    out.append(f'<text x="{M - 45}" y="{H / 2}" transform="rotate(-90 {M - 45} {H / 2})" '
               f'text-anchor="middle">{ylabel}</text>')
    lx0 = len(panels) * W + 10
    for i, label in enumerate(labels):
        y = 50 + 18 * i
        out.append(f'<line x1="{lx0}" x2="{lx0 + 25}" y1="{y}" y2="{y}" '
                   f'stroke="{COLORS[i % len(COLORS)]}" stroke-width="2"/>')
        out.append(f'<text x="{lx0 + 30}" y="{y + 4}">{label}</text>')
    out.append(f'<text x="{lx0}" y="{60 + 18 * len(labels)}">dot: lowest loss</text>')
    out.append("</svg>")
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out) + "\n")
