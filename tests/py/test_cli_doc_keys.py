"""docs/cli.md's key table lists every config key (issue 50: the μP keys were missing): each key
of the key table (normlab.Config.keys(): src/config/keys.cpp and the optimizers' own sections)
appears as a word in the row of its section; and every row names a real section whose listed keys
(the first word of each comma-separated entry of a key list) are keys of it."""
import pathlib
import re

from normlab_py import normlab

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def table_rows():
    """{section: the text of its row} from the rows "| `section` | ... |"."""
    rows = {}
    text = DOC.read_text().split("\n## Configuration keys\n", 1)[1].split("\n## ", 1)[0]
    for line in text.splitlines():
        m = re.match(r"\| `([\w.]+)` \| (.*)\|\s*$", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def test_every_key_of_the_key_table_is_in_cli_md():
    rows = table_rows()
    keys = normlab.Config.keys()
    assert len(keys) > 100 and "model.d_model" in keys
    missing = []
    for k in keys:
        section, field = k.rsplit(".", 1)
        row = rows.get(section, "")
        if not re.search(r"(?<![\w.])" + re.escape(field) + r"(?!\w)", row):
            missing.append(k)
    assert not missing, f"keys missing from {DOC}'s key table: {missing}"


def listed_keys(row):
    """The first word of each top-level comma-separated entry of the row's key lists: the code
    spans that start with a key name (`vocab_size, n_layer, ...`, `a (1.27), b (1)`)."""
    out = []
    for span in re.findall(r"`([^`]*)`", row):
        depth, entry, entries = 0, "", []
        for ch in span:
            depth += ch in "([" and 1 or (ch in ")]" and -1 or 0)
            if ch == "," and depth == 0:
                entries.append(entry)
                entry = ""
            else:
                entry += ch
        entries.append(entry)
        if len(entries) < 2 and not re.fullmatch(r"\s*\w+\s*(\(.*\))?\s*", span):
            continue  # a value or an example, not a key list
        for e in entries:
            m = re.match(r"\s*(\w+)\s*(\(|$)", e)
            if m:
                out.append(m.group(1))
    return out


def test_every_key_documented_in_cli_md_is_a_key():
    rows = table_rows()
    keys = set(normlab.Config.keys())
    sections = {k.rsplit(".", 1)[0] for k in keys}
    assert set(rows) - sections == set(), "rows of cli.md's key table for no section"
    unknown = [f"{sec}.{w}" for sec, row in rows.items() if sec not in ("data", "source")
               for w in listed_keys(row) if f"{sec}.{w}" not in keys]
    assert not unknown, f"documented in {DOC}'s key table but not keys: {unknown}"
