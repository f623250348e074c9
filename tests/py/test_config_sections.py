"""The optimizers' own sections ([optim.muon], [optim.soap], ...) and a model component's key
(model.attn_sink) from Python: nested dicts, dotted names inside a section and dotted keys at the
top all give the same config; Config[...] reads them; the earlier flat names still read; an
unknown key of a section is refused with the nearest one; a section is not a key."""
import pytest
from normlab_py import normlab


def test_nested_dotted_and_flat_spellings_give_one_config():
    want = normlab.Config({"optim": {"name": "soap", "soap": {"max_precond_dim": 64}}})
    assert normlab.Config({"optim": {"name": "soap", "soap.max_precond_dim": 64}}) == want
    assert normlab.Config({"optim.name": "soap", "optim.soap.max_precond_dim": 64}) == want
    assert normlab.Config().set("optim.name", "soap").set("optim.soap.max_precond_dim", 64) == want
    assert want["optim.soap.max_precond_dim"] == 64
    assert want["optim.soap.precondition_frequency"] == 10  # a default
    assert want.to_dict()["optim"]["soap"]["max_precond_dim"] == 64
    assert "[optim.soap]\n" in want.to_toml()
    assert normlab.Config.from_toml(want.to_toml()) == want
    assert "optim.soap.max_precond_dim" in normlab.Config.keys()


def test_earlier_flat_names_read_as_the_new_keys():
    old = normlab.Config({"optim": {"momentum": 0.9, "adafactor_d": 2.0}})
    assert old["optim.muon.momentum"] == 0.9 and old["optim.adafactor.d"] == 2.0
    assert old == normlab.Config({"optim.muon.momentum": 0.9, "optim.adafactor.d": 2.0})
    assert "adafactor_d" not in old.to_toml()


def test_a_component_key_reads_and_writes_like_any_model_key():
    c = normlab.Config({"model": {"attn_sink": "learned"}})
    assert c["model.attn_sink"] == "learned" and normlab.Config()["model.attn_sink"] == "none"
    assert normlab.Config.from_toml(c.to_toml()) == c
    with pytest.raises(normlab.ConfigError, match="model.attn_sink: unknown value \"sideways\""):
        normlab.Config({"model": {"attn_sink": "sideways"}})


def test_unknown_keys_and_sections_are_named():
    with pytest.raises(normlab.ConfigError, match="did you mean 'optim.soap.max_precond_dim'"):
        normlab.Config({"optim": {"soap": {"max_precond_dimm": 64}}})
    with pytest.raises(normlab.ConfigError, match="did you mean 'optim.soap.shampoo_beta'"):
        normlab.Config({"optim.shampoo_beta": 0.9})
    with pytest.raises(KeyError, match="'optim.soap' is not a config key"):
        normlab.Config()["optim.soap"]
