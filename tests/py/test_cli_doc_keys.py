"""docs/cli.md's key table lists every config key (issue 50: the μP keys were missing): each key
of the key table (normlab.Config.keys(), src/config/keys.cpp) appears as a word in the row of its
section."""
import pathlib
import re

from normlab_py import normlab

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def table_rows():
    """{section: the text of its row} from the rows "| `section` | ... |"."""
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"\| `(\w+)` \| (.*)\|\s*$", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def test_every_key_of_the_key_table_is_in_cli_md():
    rows = table_rows()
    keys = normlab.Config.keys()
    assert len(keys) > 100 and "model.d_model" in keys
    missing = []
    for k in keys:
        section, field = k.split(".", 1)
        row = rows.get(section, "")
        if not re.search(r"(?<![\w.])" + re.escape(field) + r"(?!\w)", row):
            missing.append(k)
    assert not missing, f"keys missing from {DOC}'s key table: {missing}"
