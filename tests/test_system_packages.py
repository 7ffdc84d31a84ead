"""The newcomer's skip report (tests/system_packages.py): what `make test` prints before it starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORT = "import sys; from tests import system_packages as s; print('\\n'.join(s.skip_report(cuda_module_cached=True)))"


def _report(env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-c", REPORT], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    return proc.stdout


def test_groups_whose_commands_are_missing_are_named_with_one_install_line() -> None:
    # With no PATH every command-line tool is missing, as on a machine without those packages.
    out = _report({"PATH": "/nonexistent", "PYTHONPATH": str(ROOT)})
    first = out.splitlines()[0]
    assert "test group(s) will skip here" in first
    for package in ("qemu-user", "nsis", "curl", "desktop-file-utils", "squashfs-tools"):
        assert package in first, first
    assert "the engine on older CPUs under emulation (tests/llamacpp/test_dispatch.py): qemu-user" in out
    assert "the Windows installer script (tests/packaging/test_nsis.py): nsis" in out


def test_ci_installs_every_package_the_table_names() -> None:
    # .ci/run reads the table itself; under it (VRAMPILOT_NO_SKIPS=1, as root) nothing is missing.
    text = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python3 tests/system_packages.py" in text
    if os.environ.get("VRAMPILOT_NO_SKIPS") == "1":
        assert "will skip here" not in _report({**os.environ, "PYTHONPATH": str(ROOT)})


def test_under_no_skips_only_the_cuda_modules_skip_is_allowed_and_only_where_it_was_not_built(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "packaging" / "engine"))
    import cuda as recipe

    test = "tests/llamacpp/test_cuda_module.py::test_a_module_built_for_other_sources_is_not_loaded"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VRAMPILOT_REQUIRE")}
    env |= {"VRAMPILOT_NO_SKIPS": "1", "PYTHONPATH": str(ROOT)}

    def run(**extra: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'p'}", test]
        return subprocess.run(cmd, capture_output=True, text=True, env=env | extra, cwd=ROOT, timeout=600)

    allowed = run()
    assert allowed.returncode == 0, allowed.stdout[-2000:]
    if recipe.cached_module() is None:
        assert "1 skipped" in allowed.stdout
        # Where CI found the module cached it must run: a missing one is a failure, not a skip.
        required = run(VRAMPILOT_REQUIRE_CUDA_MODULE="1")
        assert required.returncode == 1 and "VRAMPILOT_REQUIRE_CUDA_MODULE=1: no CUDA module cached" in required.stdout
