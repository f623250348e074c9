"""config.toml's [source] table from Python: normlab.Config.set("source.unknown", [...]) goes
through the C++ key table (the probe writes it this way), reads back equal from the TOML text,
and a bad entry is refused by name."""
import pytest
from normlab_py import normlab


def test_source_keys_set_from_python_round_trip():
    c = normlab.Config().set("source.kind", "torch").set("source.trainer", "lightning")
    c.set("source.unknown", ["optim.schedule", "train.grad_accum"]).set("source.world_size", 2)
    c.update({"source.sharding": "fsdp2"})
    assert c["source.unknown"] == ["optim.schedule", "train.grad_accum"]
    assert "[source]" in c.to_toml()
    back = normlab.Config.from_toml(c.to_toml())
    assert back == c and back["source.kind"] == "torch" and back["source.world_size"] == 2
    d = normlab.Config({"source": {"kind": "torch", "unknown": ["optim.lr"]}})
    assert d["source.unknown"] == ["optim.lr"]
    assert "[source]" not in normlab.Config().to_toml()


def test_bad_unknown_entry_is_named():
    with pytest.raises(normlab.ConfigError, match=r"unknown key 'optim\.lrr'.*optim\.lr"):
        normlab.Config().set("source.unknown", ["optim.lrr"])
