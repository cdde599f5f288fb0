"""`gptviz bench`: a benchmark that needs what this install lacks (Playwright, a checkout, a peer
package) says so in one line, status 2, never "unexpected ... please report this"."""

from __future__ import annotations

import sys

import pytest

from gptviz import cli
from gptviz.bench import command


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert "unexpected" not in err and "Traceback" not in err
    return err


@pytest.mark.parametrize("bench", command.BROWSER_BENCHES)
def test_a_dashboard_bench_without_playwright_says_what_is_missing(bench, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "playwright", None)  # an import of playwright now fails
    assert cli.main(["bench", f"--{bench}"]) == 2
    err = one_line_error(capsys)
    assert f"gptviz bench --{bench}" in err and "Playwright" in err and "checkout" not in err


def test_a_dashboard_bench_outside_a_checkout_says_so(monkeypatch, capsys, tmp_path):
    """An installed wheel has no app.py and tests/ beside its package: the bench names the checkout."""
    monkeypatch.setattr(command, "CHECKOUT", tmp_path)
    assert cli.main(["bench", "--dashboard"]) == 2
    assert "a git checkout of gptviz" in one_line_error(capsys)


def test_a_bench_whose_peer_package_is_missing_names_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "transformers", None)
    assert cli.main(["bench", "--families", "--tiny", "--lengths", "8", "--repeats", "1"]) == 2
    assert "gptviz bench --families needs the package 'transformers'" in one_line_error(capsys)


def test_options_after_the_dashes_belong_to_the_dashboard_benches_only(capsys):
    with pytest.raises(SystemExit, match="only --dashboard, --sessions, --classroom take options"):
        cli.main(["bench", "--why", "--", "--x"])
