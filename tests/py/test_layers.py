"""The layer check (tests/scripts/check_layers.py, docs/design.md): the repository passes it, and it
names the file and line of an upward include and of an include cycle."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECK = os.path.join(ROOT, "tests", "scripts", "check_layers.py")


def run(root):
    return subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True)


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def test_the_repository_has_no_upward_include():
    r = run(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no upward include, no cycle" in r.stdout


def test_an_upward_include_is_named_with_file_and_line(tmp_path):
    root = str(tmp_path)
    write(root, "src/train/trainer.cpp", '#include "train/trainer.h"\n')
    write(root, "src/train/trainer.h", "#pragma once\n")
    write(root, "src/doctor/doctor.h", "#pragma once\n")
    write(root, "src/model/model.cpp",
          '#include "model/model.h"\n#include <vector>\n#include "train/trainer.h"\n')
    write(root, "src/model/model.h", "#pragma once\n")
    write(root, "src/lab/sweep.cpp", '#include "doctor/doctor.h"\n')  # lab is above doctor: fine
    r = run(root)
    assert r.returncode == 1
    assert "src/model/model.cpp:3: includes train/trainer.h from layer 'train', above its own " \
           "layer 'model'" in r.stdout
    assert "sweep.cpp" not in r.stdout


def test_a_public_header_counts_in_its_module_layer(tmp_path):
    root = str(tmp_path)
    write(root, "include/normlab/config.h", '#include "normlab/trainer.h"\n')
    write(root, "include/normlab/trainer.h", "#pragma once\n")
    r = run(root)
    assert r.returncode == 1
    assert "include/normlab/config.h:1: includes normlab/trainer.h from layer 'train'" in r.stdout


def test_a_cycle_and_an_unknown_folder_are_refused(tmp_path):
    root = str(tmp_path)
    write(root, "src/model/a.h", '#pragma once\n#include "model/b.h"\n')
    write(root, "src/model/b.h", '#pragma once\n#include "model/a.h"\n')
    write(root, "src/newthing/x.cpp", "int x;\n")
    r = run(root)
    assert r.returncode == 1
    assert "include cycle: src/model/a.h -> src/model/b.h -> src/model/a.h" in r.stdout
    assert "src/newthing/x.cpp: in no layer" in r.stdout
