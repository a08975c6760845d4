"""Activate torch_overlay for this Python environment, or inspect and demo it.

    torch-overlay apply               install the .pth hook: every process of this
                                      environment gets the overlays, then print status
    torch-overlay remove              uninstall the hook (site-packages as before)
    torch-overlay status              versions, each overlay's state, flag and edits
    torch-overlay run -- CMD ...      run one command with the overlays active
    torch-overlay demo [--diff]       stock vs overlay kernels of a transformer MLP

``python -m torch_overlay`` and, in a checkout, ``python tools/apply.py`` are the same
command (no action: ``apply``; ``--remove``: ``remove``). ``--overlays a,b`` selects
overlays (default: all); ``--force`` accepts an unvalidated torch and enables the
overlays whose edits apply, skipping the others.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import sysconfig
import tempfile
import textwrap

PROG = "torch-overlay"
PTH_NAME = "torch_overlay.pth"
# One line: .pth files execute lines that start with "import". A failure must not
# break interpreter start-up, so it only prints.
PTH_LINE = (
    "import sys; exec(\"try:\\n import torch_overlay._autoload as _a; _a.install()\\n"
    "except Exception as _e:\\n print('torch_overlay: not activated:', _e, file=sys.stderr)\")\n"
)
ACTIONS = ("apply", "status", "run", "remove", "demo")


class UsageError(Exception):
    """One clear line for the user, exit status 2."""


def site_packages() -> pathlib.Path:
    return pathlib.Path(sysconfig.get_paths()["purelib"])


def check_stack(names: list[str] | None, force: bool) -> None:
    """Refuse an unsupported torch, a missing triton or unknown/refused overlays."""
    try:
        import torch
    except ImportError:
        raise UsageError("torch is not installed; pip install -c constraints.txt -e '.[test]'")
    try:
        import triton  # noqa: F401
    except ImportError:
        raise UsageError(f"triton is missing (torch {torch.__version__}); Inductor's GPU "
                         "codegen needs it: pip install -c constraints.txt triton")
    import torch_overlay

    version = torch.__version__.split("+")[0]
    if not force and not version.startswith(tuple(v + "." for v in torch_overlay.SUPPORTED_TORCH)):
        raise UsageError(f"torch {torch.__version__} is not supported (validated: "
                         f"{', '.join(torch_overlay.SUPPORTED_TORCH)}); use --force to try anyway")
    known = torch_overlay.load_overlays()
    unknown = [n for n in names or [] if n not in known]
    if unknown:
        raise UsageError(f"unknown overlay(s) {', '.join(unknown)}; known: {', '.join(known) or 'none'}")
    if not force:
        from torch_overlay._registry import REGISTRY

        for name in REGISTRY.with_requirements(names or known):
            reason = REGISTRY.check(name)
            if reason is not None:
                raise UsageError(f"overlay {name!r} would be refused: {reason}; use --force to "
                                 "enable the overlays whose edits apply")


def overlay_env(names: list[str] | None, force: bool) -> dict[str, str]:
    env = dict(os.environ)
    if names:
        env["TORCH_OVERLAY"] = ",".join(names)
    if force:
        env["TORCH_OVERLAY_FORCE"] = "1"
    return env


def cmd_apply(names: list[str] | None, force: bool) -> int:
    check_stack(names, force)
    pth = site_packages() / PTH_NAME
    # the selection travels in the hook itself
    setup = "".join(f"import os; os.environ.setdefault({k!r}, {v!r})\n"
                    for k, v in overlay_env(names, force).items()
                    if (names or force) and k in ("TORCH_OVERLAY", "TORCH_OVERLAY_FORCE"))
    pth.write_text(setup + PTH_LINE)
    print(f"installed {pth}")
    return cmd_status(names, force)


def cmd_remove() -> int:
    pth = site_packages() / PTH_NAME
    if pth.exists():
        pth.unlink()
        print(f"removed {pth}")
    else:
        print(f"nothing to remove: {pth} is not there")
    return 0


def cmd_status(names: list[str] | None, force: bool) -> int:
    # A fresh interpreter shows what a user's process gets, the .pth hook included:
    # torch_overlay first (its log artifacts, before torch reads $TORCH_LOGS), then what
    # the first torch.compile imports, where the hook enables the overlays.
    code = textwrap.dedent(f"""
        import sys, torch_overlay
        import torch._inductor.compile_fx
        from torch_overlay.cli import report_status
        sys.exit(report_status({bool(names or force)!r}))
    """)
    return subprocess.call([sys.executable, "-c", code], env=overlay_env(names, force))


def report_status(enable: bool) -> int:
    """Print this process's status; 2 when ``$TORCH_OVERLAY`` names an unknown overlay."""
    import torch_overlay

    if enable:
        try:
            torch_overlay.enable()
        except torch_overlay.OverlayError as e:
            print(e)
    status = torch_overlay.status()
    print(status)
    pth = site_packages() / PTH_NAME
    print("activation hook: " + (f"installed at {pth}" if pth.exists() else "not installed"))
    logs = {n.strip().lstrip("+-") for n in os.environ.get("TORCH_LOGS", "").split(",")}
    named = sorted(logs & set(torch_overlay.load_overlays()))
    if named and not pth.exists():
        print(f"TORCH_LOGS names {', '.join(named)}: a process without the activation hook "
              "must import torch_overlay before torch, or torch's import fails")
    if status.unknown:
        print(f"{PROG}: TORCH_OVERLAY names unknown overlay(s) {', '.join(status.unknown)}",
              file=sys.stderr)
        return 2
    return 0


def cmd_run(names: list[str] | None, force: bool, command: list[str]) -> int:
    if not command:
        raise UsageError(f"run needs a command: {PROG} run -- CMD ...")
    check_stack(names, force)
    with tempfile.TemporaryDirectory(prefix="torch_overlay_run_") as tmp:
        from torch_overlay._autoload import prepend_pythonpath, write_sitecustomize

        env = prepend_pythonpath(overlay_env(names, force), write_sitecustomize(tmp))
        try:
            return subprocess.call(command, env=env)
        except FileNotFoundError:
            raise UsageError(f"command not found: {command[0]}")


def cmd_demo(names: list[str] | None, force: bool, diff: bool) -> int:
    check_stack(names, force)
    from torch_overlay.demo import run_demo

    return run_demo(names, force, diff=diff)


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1:]
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n", 2)[2])
    parser.add_argument("action", nargs="?", choices=ACTIONS, default="apply")
    parser.add_argument("--remove", action="store_true", help="the same as the action remove")
    parser.add_argument("--overlays", help="comma-separated overlay names (default: all)")
    parser.add_argument("--force", action="store_true",
                        help="unvalidated torch: enable the overlays whose edits apply")
    parser.add_argument("--diff", action="store_true",
                        help="demo: print the unified diff of the generated code too")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.overlays.split(",") if n.strip()] if args.overlays else None
    try:
        if args.remove or args.action == "remove":
            return cmd_remove()
        if args.action == "apply":
            return cmd_apply(names, args.force)
        if args.action == "status":
            return cmd_status(names, args.force)
        if args.action == "run":
            return cmd_run(names, args.force, command)
        return cmd_demo(names, args.force, args.diff)
    except UsageError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
