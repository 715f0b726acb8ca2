"""Plugins add rules through the ``fold_inspector.rules`` entry point, as samples do theirs: a real
distribution on the path (its dist-info and entry_points.txt), read by importlib.metadata."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from conftest import ROOT


def _plugin(tmp_path, body: str):
    (tmp_path / "fake_rules_plugin.py").write_text(textwrap.dedent(body))
    info = tmp_path / "fake_rules_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-rules-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[fold_inspector.rules]\nfake = fake_rules_plugin:register\n")
    return tmp_path


def _run(path, code: str) -> subprocess.CompletedProcess:
    env_path = f"{path}"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": env_path})


def test_a_plugin_rule_is_offered_and_decides(tmp_path):
    path = _plugin(tmp_path, '''
        import inspector

        def register(add):
            def keep_every_site(site):
                return inspector.Skip("plugin-keeps", "the plugin keeps every site")
            add(inspector.Rule("plugin-keeps-all", "keeps every site", "the fake-rules-plugin package",
                                 check=keep_every_site))
    ''')
    out = _run(path, "import json, inspector\n"
                     "a = inspector.analyze('sample:conv_mul_scalar', stage='aten', rule='plugin-keeps-all')\n"
                     "print(json.dumps([list(inspector.rules), inspector.rules.describe('plugin-keeps-all'),"
                     " [s.reason_codes for s in a.sites]]))")
    assert out.returncode == 0, out.stderr[-2000:]
    names, help_text, codes = json.loads(out.stdout.strip().splitlines()[-1])
    assert "plugin-keeps-all" in names and "fake-rules-plugin" in help_text
    assert codes == [["rule:plugin-keeps"]]


def test_a_broken_plugin_warns_and_leaves_the_built_in_rules(tmp_path):
    path = _plugin(tmp_path, '''
        def register(add):
            raise RuntimeError("this plugin is broken")
    ''')
    out = _run(path, "import inspector\nprint(list(inspector.rules))")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "upstream" in out.stdout and "fold-rule plugin fake" in out.stderr and "broken" in out.stderr
