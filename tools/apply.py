#!/usr/bin/env python3
"""Activate torch_overlay for this Python environment, or inspect and demo it.

    python tools/apply.py                 install the .pth hook: every process of this
                                          environment gets the overlays, then print status
    python tools/apply.py --remove        uninstall the hook (site-packages as before)
    python tools/apply.py status          versions, each overlay's state, flag and edits
    python tools/apply.py run -- CMD ...  run one command with the overlays active
    python tools/apply.py demo            stock vs overlay kernels of a transformer MLP

``--overlays a,b`` selects overlays (default: all); ``--force`` accepts an unvalidated torch
and enables the overlays whose edits apply, skipping the others.
"""
from __future__ import annotations

import argparse
import difflib
import os
import pathlib
import subprocess
import sys
import sysconfig
import tempfile
import textwrap

REPO = pathlib.Path(__file__).resolve().parent.parent
PTH_NAME = "torch_overlay.pth"
# One line: .pth files execute lines that start with "import". A failure must not
# break interpreter start-up, so it only prints.
PTH_LINE = (
    "import sys; exec(\"try:\\n import torch_overlay._autoload as _a; _a.install()\\n"
    "except Exception as _e:\\n print('torch_overlay: not activated:', _e, file=sys.stderr)\")\n"
)


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


def cmd_install(names: list[str] | None, force: bool) -> int:
    check_stack(names, force)
    pth = site_packages() / PTH_NAME
    if names or force:
        # the selection travels in the hook itself
        setup = "".join(f"import os; os.environ.setdefault({k!r}, {v!r})\n"
                        for k, v in overlay_env(names, force).items()
                        if k in ("TORCH_OVERLAY", "TORCH_OVERLAY_FORCE"))
    else:
        setup = ""
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
    # A fresh interpreter shows what a user's process gets, the .pth hook included.
    pth = site_packages() / PTH_NAME
    code = textwrap.dedent(f"""
        import pathlib, torch._inductor.compile_fx, torch_overlay
        if {bool(names or force)!r}:
            try:
                torch_overlay.enable()
            except torch_overlay.OverlayError as e:
                print(e)
        print(torch_overlay.status())
        pth = pathlib.Path({str(pth)!r})
        print("activation hook: " + (f"installed at {{pth}}" if pth.exists() else "not installed"))
    """)
    return subprocess.call([sys.executable, "-c", code], env=overlay_env(names, force))


def cmd_run(names: list[str] | None, force: bool, command: list[str]) -> int:
    if not command:
        raise UsageError("run needs a command: python tools/apply.py run -- CMD ...")
    check_stack(names, force)
    with tempfile.TemporaryDirectory(prefix="torch_overlay_run_") as tmp:
        from torch_overlay._autoload import prepend_pythonpath, write_sitecustomize

        env = prepend_pythonpath(overlay_env(names, force), write_sitecustomize(tmp))
        try:
            return subprocess.call(command, env=env)
        except FileNotFoundError:
            raise UsageError(f"command not found: {command[0]}")


def cmd_demo(names: list[str] | None, force: bool) -> int:
    check_stack(names, force)
    sys.path.insert(0, str(REPO / "tools"))
    from demo import run_demo

    return run_demo(names, force)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n", 2)[2])
    parser.add_argument("action", nargs="?", choices=["status", "run", "demo"])
    parser.add_argument("--remove", action="store_true", help="uninstall the activation hook")
    parser.add_argument("--overlays", help="comma-separated overlay names (default: all)")
    parser.add_argument("--force", action="store_true", help="unvalidated torch: enable the overlays whose edits apply")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.overlays.split(",") if n.strip()] if args.overlays else None
    try:
        if args.remove:
            return cmd_remove()
        if args.action is None:
            return cmd_install(names, args.force)
        if args.action == "status":
            return cmd_status(names, args.force)
        if args.action == "run":
            return cmd_run(names, args.force, command)
        return cmd_demo(names, args.force)
    except UsageError as e:
        print(f"apply.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
