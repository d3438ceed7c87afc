"""Docstrings from docs/ops.md, the one description of what every op computes.

The build copies docs/ops.md beside this file (``ops.md``); the typed functions (kernelfusion.functional)
and the registry ops (kernelfusion.ops) take their descriptions from it at import, so that the docstrings
say what the documentation says and cannot drift from it. An excerpt is made of the page's blocks that
name an op: the table rows whose first cell names it, the bullets and bold paragraphs that open with
``name(`` or ``**name``, and the op's row of the generated table that ends the page (its inputs, outputs
and dtypes).
"""
import os
import re

_PATH = os.path.join(os.path.dirname(__file__), "ops.md")
_blocks = None


def _parse():
    """The page as (section, kind, header, text) blocks: kind is 'row' (a table row; header the table's
    header cells), 'item' (a bullet with its continuation lines) or 'para' (a paragraph)."""
    try:
        with open(_PATH, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    blocks, section, header, cur = [], "", None, None

    def flush():
        nonlocal cur
        if cur is not None:
            blocks.append((cur[0], cur[1], None, " ".join(s.strip() for s in cur[2])))
            cur = None

    for line in lines:
        if line.startswith("#"):
            flush()
            section, header = line.lstrip("#").strip(), None
        elif line.startswith("|"):
            flush()
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if all(set(c) <= set("-: ") for c in cells):
                continue
            if header is None:
                header = cells
            else:
                blocks.append((section, "row", header, cells))
        elif not line.strip() or line.startswith("<!--"):
            flush()
            header = None
        elif re.match(r"\s*- ", line):
            flush()
            cur = [section, "item", [re.sub(r"^\s*- ", "", line)]]
        elif cur is not None:
            cur[2].append(line)
        else:
            header = None
            cur = [section, "para", [line]]
    flush()
    return blocks


def blocks():
    global _blocks
    if _blocks is None:
        _blocks = _parse()
    return _blocks


def _row_text(header, cells):
    parts = [cells[0]] + [f"{h}: {c}" for h, c in zip(header[1:], cells[1:]) if c]
    return "; ".join(parts)


def _names(cell, key):
    return key in cell and re.search(r"(?<![\w])" + re.escape(key) + r"(?![\w])", cell) is not None


def excerpt(*keys):
    """The text of docs/ops.md about ops or topics `keys` (op names, or the bold words that open a
    paragraph such as "causal"), in the page's order; "" when the page is not there."""
    out = []
    for section, kind, header, text in blocks():
        if kind == "row":
            if section == "Every op":
                continue
            if any(_names(text[0], k) for k in keys):
                out.append(f"[{section}] " + _row_text(header, text))
        else:
            head = text[:120]
            if any(f"`{k}(" in head or head.startswith(f"**{k}") or head.startswith(f"{k},")
                   for k in keys):
                out.append(f"[{section}] " + text)
    return "\n\n".join(dict.fromkeys(out))


def signature(name):
    """The registry's line for op `name` in the generated table of docs/ops.md ("" when absent)."""
    for section, kind, header, cells in blocks():
        if kind == "row" and section == "Every op" and cells[0] == name:
            return _row_text(header, cells)
    return ""


def docstring(head, *keys, ops=()):
    """A docstring: `head` (the Python signature and what it returns), then docs/ops.md's excerpt about
    `keys`, then the registry's line of each op in `ops`."""
    parts = [head.strip()]
    text = excerpt(*keys)
    if text:
        parts.append("From docs/ops.md:\n\n" + text)
    sigs = [s for s in (signature(o) for o in ops) if s]
    if sigs:
        parts.append("Registry: " + "\n".join(sigs))
    return "\n\n".join(parts)
