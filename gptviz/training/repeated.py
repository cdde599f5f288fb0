"""A synthetic corpus where induction heads pay off: lines of random symbols, each said twice.

    python -m gptviz.training.repeated --out repeated.txt

Each line is a random number of symbols (min_length..max_length) drawn uniformly from `alphabet`,
then the same symbols again, then a newline. The lengths vary so that no fixed look-back offset
finds the copy: only attention by content does. The first half cannot be predicted (ln |alphabet|
nats a symbol); the second half is free to a model that finds the earlier copy of the current
symbol and reads what came after it: a previous-token head in one layer and an induction head in
the next. Loss drops sharply when they form.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def repeated_text(
    n_lines: int, min_length: int = 8, max_length: int = 24, alphabet: str = ALPHABET, seed: int = 0
) -> str:
    """n_lines lines, each min_length..max_length random symbols followed by the same symbols again."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        half = "".join(rng.choice(alphabet) for _ in range(rng.randint(min_length, max_length)))
        lines.append(half + half + "\n")
    return "".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Write the corpus to --out."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--lines", type=int, default=20000)
    p.add_argument("--min-length", type=int, default=8)
    p.add_argument("--max-length", type=int, default=24)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    Path(args.out).write_text(repeated_text(args.lines, args.min_length, args.max_length, seed=args.seed))


if __name__ == "__main__":
    main()
