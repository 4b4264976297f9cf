"""Run one benchmark on two trees of the project, alternated, in one run.

A change is judged against the tree before it on the same machine in the same minutes:
`--base` (a commit) is checked out in a temporary worktree, and the benchmark module
runs there and in this tree in turn, `--times` times each, the order swapped every
round so neither tree always runs second. Each tree runs its own code (its own `bench`
and `webapp`, found first through the working directory and PYTHONPATH), with this
environment's dependencies. Every run's output is kept; the lines matching `--keep` are
printed again at the end, by tree, for reading side by side.

    python -m bench.trees --base 5f53662 --times 3 --keep "N = 200|admission" \\
        -- bench.load --loads 200 --no-postgres --pairs 20
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import machine

HERE = Path(__file__).resolve().parent.parent


def run_in(tree: Path, module: str, args: list[str]) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{module} failed in {tree}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.trees", description=__doc__)
    parser.add_argument("--base", required=True, help="the commit to compare this tree with")
    parser.add_argument("--times", type=int, default=3, help="runs of each tree")
    parser.add_argument("--keep", default=".", help="a regex: the lines to print again")
    parser.add_argument("module", help="the benchmark module, e.g. bench.load")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    options = parser.parse_args(argv)
    keep = re.compile(options.keep)
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain"], cwd=HERE, capture_output=True, text=True
    )
    here_name = f"this tree ({head}{', with changes' if dirty.stdout.strip() else ''})"
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.2f}")
    kept: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder) / "base"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(base), options.base],
            cwd=HERE,
            check=True,
            capture_output=True,
        )
        trees = {f"base ({options.base})": base, here_name: HERE}
        try:
            for round_number in range(options.times):
                order = list(trees.items())
                if round_number % 2:
                    order.reverse()
                for name, tree in order:
                    print(f"\n=== round {round_number + 1}, {name} ===", flush=True)
                    output = run_in(tree, options.module, options.args)
                    print(output, flush=True)
                    lines = [line for line in output.splitlines() if keep.search(line)]
                    kept.setdefault(name, []).extend(
                        f"[round {round_number + 1}] {line}" for line in lines
                    )
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(base)], cwd=HERE, check=False
            )
    for name, lines in kept.items():
        print(f"\n--- {name}")
        print("\n".join(lines))


if __name__ == "__main__":
    main()
