"""The Windows installer under Wine (VRAMPILOT_SETUP_EXE=dist/VRAM_Pilot-<v>-setup.exe; make
package-windows-test): a silent install into a fresh 64-bit prefix, the installed app's commands,
its window offscreen, a hostile file name, then a silent uninstall that leaves nothing behind but
the user's data.

Tested under Wine 8 only, not on real Windows (see docs/install.md). Wine's quirks and their
workarounds (shared/guide/windows-route.md): std streams must be pipes, not files; QT_* variables
do not pass from Unix into Windows processes, so the window gets them from the registry (the
user's environment); Wine's cmd reads a .bat in the OEM code page whatever `chcp` says; `reg` is
asked for the 64-bit view.

The engine tests need a bundle with llama.cpp; VRAMPILOT_WINDOWS_ENGINE=none (a bundle built
without it) turns them into skips that say so, and doctor must then say the engine is missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tests import waits
from tests.packaging.conftest import ARTIFACTS, PACKAGING, serve_and_ask
from vrampilot.server import free_port
from vrampilot.server.process import health

APP_DIR = r"C:\Program Files\VRAM Pilot"
UNINSTALL_KEY = r"HKLM\Software\Microsoft\Windows\CurrentVersion\Uninstall\VRAMPilot"
REG_KEYS = (
    UNINSTALL_KEY,
    r"HKLM\Software\VRAMPilot",
    r"HKLM\Software\Classes\VRAMPilot.gguf\shell\open\command",
    r"HKLM\Software\Classes\Applications\vrampilot.exe",
)
START_MENU = "ProgramData/Microsoft/Windows/Start Menu/Programs/VRAM Pilot.lnk"
# Every character Windows allows in a name that a shell or a quoting layer could trip on
# (double quotes and the like are not allowed in Windows file names at all).
HOSTILE_DIR = "C:\\my models\\it's 100% ^caret & (x) ünï 模型"
HOSTILE_NAME = "Smol 'LM' 50% ^ & ü 模型.gguf"
# cmd has no escape for % inside quotes: the export refuses such a path (vrampilot/export/shell.py),
# so the exported line's model lies where neither its folder nor its name has one.
HOSTILE_EXPORT_DIR = "C:\\my models\\it's ^caret & (x) ünï 模型"
HOSTILE_EXPORT_NAME = "Smol 'LM' ^ & (ü) 模型.gguf"
FONT_DIR = r"C:\qtfonts"
DEJAVU = Path("/usr/share/fonts/truetype/dejavu")  # Debian's fonts-dejavu-core
WINDOW_SECONDS = 30
ENGINE_ABSENT = os.environ.get("VRAMPILOT_WINDOWS_ENGINE") == "none"
needs_engine = pytest.mark.skipif(
    ENGINE_ABSENT, reason="VRAMPILOT_WINDOWS_ENGINE=none: the installer was built without llama.cpp"
)
# Under Wine on two shared cores: what one command may use at most before it counts as hung.
CPU_S = 600.0


@dataclass(frozen=True)
class Prefix:
    """A Wine prefix with the installed app, and how to run Windows programs in it."""

    root: Path
    home_win: str  # VRAMPILOT_HOME, a Windows path inside the prefix

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "WINEPREFIX": str(self.root),
            "WINEARCH": "win64",
            "WINEDEBUG": "-all",
            "VRAMPILOT_HOME": self.home_win,
            "PYTHONUTF8": "1",
            **extra,
        }

    def unix(self, windows_path: str) -> Path:
        assert windows_path[:3].upper() == "C:\\", windows_path
        return self.root / "drive_c" / windows_path[3:].replace("\\", "/")

    def run(
        self, *args: str, cpu_s: float = CPU_S, extra_env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`wine ARGS` with pipes for all three streams (files break Python's stdio under Wine 8)."""
        return waits.run(
            ["wine", *args], cpu_s=cpu_s, env=self.env(**(extra_env or {})), stdin=subprocess.DEVNULL, errors="replace"
        )

    def cli(self, *args: str, cpu_s: float = CPU_S) -> subprocess.CompletedProcess[str]:
        return self.run(APP_DIR + r"\vrampilot-cli.exe", *args, cpu_s=cpu_s)

    def reg_query(self, key: str) -> subprocess.CompletedProcess[str]:
        return self.run("reg", "query", key, "/reg:64", cpu_s=60)


def said(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{wine_noise_out(result.stderr)}"


def wine_noise_out(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if "wine32" not in line and "multiarch" not in line)


@pytest.fixture(scope="module")
def installed(setup_exe: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prefix]:
    """setup.exe /S in a fresh prefix (made by the build script, with the ICU stand-in Qt needs)."""
    root = tmp_path_factory.mktemp("wine") / "prefix"
    subprocess.run(
        [sys.executable, str(PACKAGING / "windows" / "build.py"), "--new-prefix", str(root)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    prefix = Prefix(root, r"C:\vrampilot-home")
    result = prefix.run(str(setup_exe), "/S")
    assert result.returncode == 0, said(result)
    yield prefix
    subprocess.run(["wineserver", "-k"], env=prefix.env(), check=False)


# 150 MB measured without the engine (the bundle 274 MB: the model 94, Qt 72, numpy's OpenBLAS 32,
# cryptography 15); the engine adds its CPU variants, programs and the MinGW runtime.
SETUP_BUDGET_BYTES = 350 * 1000 * 1000


def test_installer_fits_the_size_budget(setup_exe: Path) -> None:
    size = setup_exe.stat().st_size
    assert size < SETUP_BUDGET_BYTES, (
        f"{setup_exe.name} is {size / 1e6:.1f} MB, budget {SETUP_BUDGET_BYTES / 1e6:.0f} MB"
    )


def test_silent_install_writes_files_shortcut_and_registry(installed: Prefix) -> None:
    app = installed.unix(APP_DIR)
    for name in ("vrampilot.exe", "vrampilot-cli.exe", "uninstall.exe"):
        assert (app / name).is_file(), f"not installed: {app / name}; there: {sorted(p.name for p in app.iterdir())}"
    model = app / "_internal" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert model.is_file(), "the embedded model is not in the installed app"
    assert (installed.root / "drive_c" / START_MENU).is_file(), "no Start-menu entry"
    for key in REG_KEYS:
        result = installed.reg_query(key)
        assert result.returncode == 0, f"{key} missing after install: {said(result)}"
    uninstall = installed.reg_query(UNINSTALL_KEY).stdout
    assert "QuietUninstallString" in uninstall and "DisplayVersion" in uninstall, uninstall
    assoc = installed.reg_query(r"HKLM\Software\Classes\VRAMPilot.gguf\shell\open\command").stdout
    assert 'vrampilot.exe" gui "%1"' in assoc, assoc


def test_version(installed: Prefix) -> None:
    from vrampilot import __version__

    result = installed.cli("--version")
    assert result.returncode == 0, said(result)
    assert result.stdout.strip() == f"vrampilot {__version__}", said(result)


def test_doctor_names_the_cpu_path_and_the_engine(installed: Prefix) -> None:
    result = installed.cli("doctor", "--json")
    assert result.returncode == 0, said(result)
    report = json.loads(result.stdout)
    llama = report["llama_cpp"]
    if ENGINE_ABSENT:
        assert llama["error"], f"doctor does not say llama.cpp is missing: {llama}"
    else:
        assert llama["error"] is None, llama
        assert llama["backend_mode"] == "dispatched", llama
        assert llama["cpu_variant"], llama
    text = installed.cli("doctor")
    assert text.returncode == 0, said(text)
    # Wine has no NVIDIA driver and no GPU: doctor says why the plan is for the CPU, and which
    # CPU code runs (or that there is no engine at all).
    assert "no NVIDIA GPU detected, planning for the CPU" in text.stdout, said(text)
    if ENGINE_ABSENT:
        assert "llama-cpp-python is not installed" in text.stdout, said(text)
    else:
        assert re.search(r"CPU code: \w+ variant", text.stdout), said(text)


def test_plan_on_the_embedded_model(installed: Prefix) -> None:
    result = installed.cli("plan", "--json")
    assert result.returncode == 0, said(result)
    plan = json.loads(result.stdout)
    assert plan["model"].endswith(r"_internal\models\SmolLM2-135M-Instruct.Q4_1.gguf"), plan["model"]
    assert plan["model"].startswith(APP_DIR), plan["model"]
    assert plan["fits"] is True, plan


def hostile_copy(prefix: Prefix, name: str, folder: str = HOSTILE_DIR) -> str:
    """The embedded model copied under a name full of shell-special and non-ASCII characters."""
    target = prefix.unix(folder) / name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(prefix.unix(APP_DIR) / "_internal" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf", target)
    return folder + "\\" + name


def test_plan_takes_a_hostile_file_name(installed: Prefix) -> None:
    path = hostile_copy(installed, HOSTILE_NAME)
    result = installed.cli("plan", "--json", path)
    assert result.returncode == 0, said(result)
    assert json.loads(result.stdout)["model"] == path, said(result)


@pytest.mark.skipif(
    ENGINE_ABSENT, reason="the window imports llama_cpp at start (vrampilot/llamacpp/log.py): needs the engine"
)
def test_window_opens_a_hostile_file_through_its_association(installed: Prefix) -> None:
    """A double-click on a .gguf: `start FILE` opens it through the association the installer
    registered (ShellExecute: `vrampilot.exe gui "%1"`, no cmd in between), and the window
    (no console) opens that very file, draws offscreen and ends after its screenshot."""
    path = hostile_copy(installed, HOSTILE_NAME)
    shot_win = r"C:\window.png"
    shot = installed.unix(shot_win)
    shot.unlink(missing_ok=True)
    threads = shot.with_name(shot.name + ".threads.txt")
    threads.unlink(missing_ok=True)
    # Qt's offscreen platform reads fonts from one folder; Wine's prefix has none in its Windows
    # folder (Windows has them), so text drew as boxes. Wine's own fonts drew it, but their
    # average character width made every word-wrapped label 1,260 px wide (a window 11,790 px
    # wide); DejaVu Sans gives real metrics (it has no CJK glyphs: those stay boxes).
    fonts = installed.unix(FONT_DIR)
    fonts.mkdir(exist_ok=True)
    for name in ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf"):
        shutil.copy2(DEJAVU / name, fonts / name)
    # QT_* variables from Unix do not reach a Windows process under Wine; the user's environment
    # in the registry does, as it does on Windows.
    for name, value in (("QT_QPA_PLATFORM", "offscreen"), ("QT_QPA_FONTDIR", FONT_DIR)):
        result = installed.run("reg", "add", r"HKCU\Environment", "/v", name, "/d", value, "/f", cpu_s=60)
        assert result.returncode == 0, said(result)
    run = installed.run(
        "start",
        "/wait",
        path,
        # Under Wine the window's first look at the machine and the model takes ~20 s.
        extra_env={"VRAMPILOT_SMOKE_SCREENSHOT": shot_win, "VRAMPILOT_SMOKE_SECONDS": str(WINDOW_SECONDS)},
    )
    hung = threads.read_text(errors="replace") if threads.is_file() else ""
    assert run.returncode == 0 and not hung.strip(), (
        f"{said(run)}\n--- vrampilot.exe did not end after its shot:\n{hung}"
    )
    assert shot.is_file(), f"vrampilot.exe saved no screenshot: {said(run)}"
    from struct import unpack

    width, height = unpack(">II", shot.read_bytes()[16:24])
    assert 640 <= width <= 2000 and 400 <= height <= 1500, (width, height)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy2(shot, ARTIFACTS / "windows-gui.png")
    # The window keeps the model it opened in its settings (QSettings' INI doubles backslashes):
    # the path arrived whole, its %, ^, & and non-ASCII characters included.
    settings = installed.unix(installed.home_win + r"\config\settings.ini").read_text(encoding="utf-8")
    opened = re.search(r"^last=(.*)$", settings.split("[model]", 1)[-1], re.MULTILINE)
    assert opened and opened.group(1).replace("\\\\", "\\") == path, settings


@needs_engine
def test_chat_answers(installed: Prefix) -> None:
    result = installed.cli(
        "chat", "--prompt", "Say hello.", "--max-tokens", "8", "--seed", "1", "--ctx", "512", "--threads", "1", "--json"
    )
    assert result.returncode == 0, said(result)
    reply = json.loads(result.stdout)
    assert reply["reply"].strip(), reply
    assert 0 < reply["stats"]["completion_tokens"] <= 8, reply


def ask_chat(port: int) -> str:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 6}
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    reply = json.loads(conn.getresponse().read())
    conn.close()
    assert "choices" in reply, reply
    return str(reply["choices"][0]["message"]["content"])


def wait_until_serving(proc: subprocess.Popen[str], port: int) -> None:
    """Until the server answers /health with its model loaded (it listens while the model still
    loads, answering 503), bounded by work (tests/waits.py)."""

    def serving() -> bool:
        assert proc.poll() is None, f"exited with {proc.returncode} before serving on {port}"
        return health(f"http://127.0.0.1:{port}", timeout_s=waits.POLL_S * 4) == 200

    waits.until_true(serving, cpu_s=CPU_S)


def llama_servers(prefix: Prefix) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline", "environ"]):
        cmd = " ".join(p.info["cmdline"] or ())
        if "llama-server" in cmd and (p.info["environ"] or {}).get("WINEPREFIX") == str(prefix.root):
            found.append(p)
    return found


@needs_engine
def test_serve_answers_and_stops_cleanly(installed: Prefix, tmp_path: Path) -> None:
    """The installed llama-server.exe answers /v1/chat/completions; Ctrl-C stops serve with exit 0
    and its llama-server with it."""
    argv, reply = serve_and_ask(["wine", APP_DIR + r"\vrampilot-cli.exe"], installed.env(), tmp_path)
    assert argv[0].lower() == (APP_DIR + r"\_internal\llama_cpp\lib\llama-server.exe").lower(), argv
    assert reply.strip()
    # serve has exited (exit 0); its job object ends llama-server.exe, which Wine carries out
    # asynchronously: wait for those processes to end, a bounded wait on the condition itself.
    _, alive = psutil.wait_procs(llama_servers(installed), timeout=60)
    assert not alive, f"llama-server.exe outlived vrampilot serve: {[p.cmdline() for p in alive]}"


@needs_engine
def test_exported_cmd_line_runs_the_bundled_server(installed: Prefix) -> None:
    refused = installed.cli("export", hostile_copy(installed, HOSTILE_NAME), "--shell", "cmd")
    assert refused.returncode == 2 and "contains a % character" in refused.stderr, said(refused)
    path = hostile_copy(installed, HOSTILE_EXPORT_NAME, HOSTILE_EXPORT_DIR)
    port = free_port()
    export = installed.cli("export", path, "--shell", "cmd", "--port", str(port), "--ctx", "1024", "--threads", "1")
    assert export.returncode == 0, said(export)
    line = export.stdout.strip().splitlines()[-1]
    assert APP_DIR + r"\_internal\llama_cpp\lib\llama-server.exe" in line, line
    # The model's path reaches cmd as it is, the non-ASCII characters included, through a
    # variable: Wine's cmd decodes a .bat in the OEM code page whatever `chcp 65001` says (real
    # Windows 10 and later honour it), so a literal path in the file arrived as mojibake
    # ("No such file or directory"). cmd expands %VAR% before it parses quotes, ^ and &, so
    # the line's quoting is tested as a pasted line's would be; llama-server then reads its
    # wide command line (GetCommandLineW) and opens the file by its UTF-16 name.
    assert line.count(f'"{path}"') == 1, line
    script = installed.root / "drive_c" / "exported.bat"
    script.write_text("@echo off\r\n" + line.replace(path, "%VRAMPILOT_TEST_MODEL%") + "\r\n", encoding="ascii")
    proc = subprocess.Popen(
        ["wine", "cmd", "/c", r"C:\exported.bat"],
        env=installed.env(VRAMPILOT_TEST_MODEL=path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )
    try:
        wait_until_serving(proc, port)
        assert ask_chat(port).strip()
    finally:
        installed.run("taskkill", "/f", "/im", "llama-server.exe", cpu_s=60)
        proc.communicate(timeout=120)


def test_silent_uninstall_leaves_only_the_users_data(installed: Prefix) -> None:
    """Last: every file, shortcut and key goes; %LOCALAPPDATA%\\VRAMPilot stays."""
    users = installed.root / "drive_c" / "users"
    local = next(p for p in users.iterdir() if (p / "AppData" / "Local").is_dir()) / "AppData" / "Local"
    data = local / "VRAMPilot" / "chats" / "kept.json"
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_text("{}")
    app = installed.unix(APP_DIR)
    result = installed.run(APP_DIR + r"\uninstall.exe", "/S")
    assert result.returncode == 0, said(result)
    # NSIS's uninstaller copies itself to %TEMP% and returns at once; wineserver -w waits for
    # every process of the prefix, that copy included.
    subprocess.run(["wineserver", "-w"], env=installed.env(), check=True, timeout=600)
    assert not app.exists(), f"left behind: {sorted(str(p.relative_to(app)) for p in app.rglob('*'))}"
    assert not (installed.root / "drive_c" / START_MENU).exists(), "Start-menu entry left behind"
    for key in REG_KEYS:
        result = installed.reg_query(key)
        assert result.returncode != 0, f"{key} left behind: {result.stdout}"
    assert data.is_file(), "the uninstaller removed the user's data"
