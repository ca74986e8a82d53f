#!/usr/bin/env python3
"""The table of docs/VERIFICATION.md, "How fast explore finds a plant", from what
scripts/plant-speed.sh wrote (target/plant-speed.tsv; the last line of a plant wins), with a
row for every plant of scripts/plant-spaces.tsv, and a summary line.

    python3 scripts/plant-speed-table.py [TSV...]    # default: target/plant-speed.tsv
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cpu(text):
    """`0` is printed as `<1`: the CPU time rounded to whole seconds."""
    return "<1" if text == "0" else text


def main():
    sources = [Path(arg) for arg in sys.argv[1:]] or [ROOT / "target" / "plant-speed.tsv"]
    spaces = {}
    for line in (ROOT / "scripts" / "plant-spaces.tsv").read_text().splitlines():
        if line and not line.startswith("#"):
            plant, space = line.split("\t")[:2]
            spaces[plant] = space
    measured = {}
    for source in sources:
        for line in source.read_text().splitlines():
            fields = line.split("\t")
            if len(fields) == 5:
                measured[fields[0]] = fields
    print("| plant | space | CPU seconds per start | median | starts that found it |")
    print("|---|---|---|---|---|")
    found_all = found_some = not_found = missing = 0
    for plant in sorted(spaces):
        if plant not in measured:
            missing += 1
            print(f"| `{plant}` | `{spaces[plant]}` | not measured yet | | |")
            continue
        _, space, per_start, median, found = measured[plant]
        starts = " ".join(cpu(value) for value in per_start.split())
        found_count, tried = (int(n) for n in found.split("/"))
        if median != "not found":
            found_all += 1
            median = cpu(median)
        elif found_count > 0:
            found_some += 1
        else:
            not_found += 1
        print(f"| `{plant}` | `{space}` | {starts} | {median} | {found} |")
    print()
    print(
        f"{len(spaces)} plants: {found_all} found from every start, {found_some} from some "
        f"starts, {not_found} not found within the budget, {missing} not measured."
    )


if __name__ == "__main__":
    main()
