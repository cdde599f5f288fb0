"""The package as a user gets it: the wheel `pip install .` builds, installed into a folder of its
own and run from a working folder outside the checkout, so nothing can come from the source tree.
(The dashboard from the same install, in a real browser: tests/e2e/test_installed_dashboard.py.)"""

from __future__ import annotations

import json
import re
import sys
import zipfile
from pathlib import Path

import pytest
from installed import CHECKPOINTS, ROOT, installed_package

pytestmark = pytest.mark.slow  # builds a wheel, installs it, starts processes


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    return installed_package(tmp_path_factory)


def sources() -> set[str]:
    """Every module of the library and the dashboard, named as the wheel must hold it."""
    lib = {p.relative_to(ROOT).as_posix() for p in (ROOT / "gptviz").rglob("*.py") if "__pycache__" not in p.parts}
    views = {f"gptviz/_app/views/{p.name}" for p in (ROOT / "views").glob("*.py")}
    return lib | views | {"gptviz/_app/app.py"}


def test_the_wheel_holds_every_module_and_nothing_stale(pkg):
    names = zipfile.ZipFile(pkg.wheel).namelist()
    modules = {n for n in names if n.endswith(".py")}
    assert sources() - modules == set(), "modules missing from the wheel"
    assert modules - sources() == set(), "modules in the wheel with no source (a stale build?)"
    subpackages = {p.parent.relative_to(ROOT).as_posix() for p in (ROOT / "gptviz").glob("*/__init__.py")}
    assert {"gptviz/figures", "gptviz/formats", "gptviz/dashboard", "gptviz/tokenizers"} <= subpackages
    for sub in subpackages:
        assert f"{sub}/__init__.py" in names
    assert any(n.startswith("gptviz/figures/") and not n.endswith("__init__.py") for n in names)
    assert {"gptviz/_app/app.py", "gptviz/_app/views/overview.py"} <= modules
    gpt2 = {f"gptviz/tokenizers/gpt2_files/{n}" for n in ("encoder.json.gz", "vocab.bpe.gz", "README.md")}
    assert gpt2 <= set(names), "GPT-2's BPE files (nanoGPT's fallback tokenizer) are missing from the wheel"
    assert all(n.startswith(("gptviz/", "gptviz-")) for n in names), "only the package and its metadata"


def test_the_wheel_metadata_names_the_command_and_the_requirements(pkg):
    with zipfile.ZipFile(pkg.wheel) as z:
        info = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = z.read(info).decode()
        entry_points = z.read(info.replace("METADATA", "entry_points.txt")).decode()
    assert re.search(r"^gptviz = gptviz\.cli:main$", entry_points, re.M)
    required = {m.group(1).lower() for m in re.finditer(r"^Requires-Dist: ([A-Za-z0-9_.-]+)", meta, re.M)}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        name = re.match(r"[A-Za-z0-9_.-]*", line.split("#")[0].strip()).group(0)
        if name:
            assert name.lower() in required, f"{name} from requirements.txt is not a dependency of the wheel"
    assert re.search(r"^License-Expression: MIT$", meta, re.M)


def test_python_imports_the_installed_copy_and_its_app(pkg):
    code = "import gptviz, gptviz.cli; print(gptviz.__file__); print(gptviz.cli.app_file())"
    r = pkg.run(sys.executable, "-c", code)
    assert r.returncode == 0, r.stderr
    module, app = (Path(line) for line in r.stdout.splitlines())
    assert module == pkg.target / "gptviz" / "__init__.py", "gptviz was not imported from the installed copy"
    assert app == pkg.target / "gptviz" / "_app" / "app.py", "the dashboard would not run the installed app"
    assert ROOT not in Path(pkg.work).parents


def test_the_console_script_runs_on_this_python(pkg):
    shebang = pkg.script.read_text().splitlines()[0]
    assert shebang.startswith("#!")
    assert Path(shebang[2:].strip()).resolve() == Path(sys.executable).resolve()


def test_gptviz_info_from_the_installed_script(pkg):
    ckpt = CHECKPOINTS / "shakespeare-char"
    r = pkg.run(str(pkg.script), "info", "--checkpoint", str(ckpt))
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == ""
    for section in ("== model card", "== load report", "== shape trace"):
        assert section in r.stdout
    cfg = json.loads((ckpt / "config.json").read_text())["config"]
    card = r.stdout.split("== load report")[0]
    for key in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "norm", "activation"):
        assert re.search(rf"^\s*{key}\s+{cfg[key]}\s*$", card, re.M), f"{key} = {cfg[key]} not in the model card"
    head_dim = cfg["n_embd"] // cfg["n_head"]
    assert f"C={cfg['n_embd']}, H={cfg['n_head']}, D={head_dim}, V={cfg['vocab_size']}" in r.stdout


def test_a_missing_checkpoint_is_one_line_from_the_installed_script(pkg):
    r = pkg.run(str(pkg.script), "info", "--checkpoint", str(pkg.work / "nothing-here"))
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error: ")
    assert "Traceback" not in r.stderr


def readme_commands() -> set[str]:
    """The commands the README and docs/ run, spelled as they spell them: `.venv/bin/gptviz COMMAND`."""
    text = "\n".join(f.read_text() for f in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    return set(re.findall(r"\.venv/bin/gptviz ([a-z]+)", text))


def test_help_lists_every_command_and_each_has_its_own_help(pkg):
    commands = readme_commands() | {"dashboard"}
    assert {"trace", "info", "check", "patch", "train", "scan", "bench", "handout"} <= commands  # documented
    r = pkg.run(sys.executable, "-m", "gptviz", "--help")
    assert r.returncode == 0, r.stderr
    listed = set(re.search(r"\{([a-z,]+)\}", r.stdout).group(1).split(","))
    assert commands <= listed
    for command in sorted(listed):
        assert re.search(rf"^\s+{command}\s+\S", r.stdout, re.M), f"{command} has no one-line help"
        sub = pkg.run(sys.executable, "-m", "gptviz", command, "--help")
        assert sub.returncode == 0, sub.stderr
        assert sub.stdout.startswith("usage:") and command in sub.stdout.splitlines()[0]
    dash = pkg.run(str(pkg.script), "dashboard", "--help")
    assert dash.returncode == 0 and "--port" in dash.stdout and "--address" in dash.stdout


def test_the_dashboard_benchmarks_say_in_one_line_what_an_install_lacks(pkg):
    """An install has no checkout (app.py, tests/) beside its package, and maybe no Playwright: `gptviz bench
    --dashboard` says so in one line (it ended in "unexpected ModuleNotFoundError ... please report this")."""
    r = pkg.run(str(pkg.script), "bench", "--dashboard")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("error: gptviz bench --dashboard") and "a git checkout of gptviz" in r.stderr
    blocked = "import sys; sys.modules['playwright'] = None; from gptviz.cli import main; sys.exit(main(sys.argv[1:]))"
    r = pkg.run(sys.executable, "-c", blocked, "bench", "--sessions")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Playwright" in r.stderr and "checkout" in r.stderr and "unexpected" not in r.stderr


def test_the_wheel_builds_without_setuptools_warnings(pkg):
    assert "would be ignored" not in pkg.build_log
    assert "SetuptoolsDeprecationWarning" not in pkg.build_log


def test_the_installed_package_carries_the_shipped_checkpoints_lessons_and_scan(pkg):
    """`pip install .` is the real thing: from an empty folder, with no environment variable naming a
    folder, the install finds its own checkpoints, the sample corpus and the shipped scan."""
    code = (
        "import json; from gptviz.shipped import shipped_dir; import gptviz; "
        "c = shipped_dir('checkpoints'); s = shipped_dir('samples'); "
        "b = gptviz.load(c / 'shakespeare-char'); "
        "print(json.dumps([str(c), sorted(p.name for p in c.iterdir() if p.is_dir()), "
        "(s / 'scans' / 'shakespeare-char' / 'summary.json').is_file(), len(list((s / 'shakespeare').glob('*.txt'))), "
        "b.tokenizer.decode(b.tokenizer.encode('ROMEO.'))]))"
    )
    env = dict.fromkeys(("GPTVIZ_CHECKPOINTS_DIR", "GPTVIZ_SAMPLES_DIR"), "")
    r = pkg.run(sys.executable, "-c", code, **env)
    assert r.returncode == 0, r.stderr
    folder, names, scan, texts, text = json.loads(r.stdout)
    assert Path(folder).is_relative_to(pkg.target), folder
    assert {p.name for p in CHECKPOINTS.iterdir() if p.is_dir()} == set(names)
    assert scan and texts == len(list((ROOT / "samples" / "shakespeare").glob("*.txt"))) and text == "ROMEO."
