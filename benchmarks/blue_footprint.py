"""The recoded BLUE's covariance footprint of the DHC persons preset, from the tree alone.

For DHC-shaped states (``benchmarks/dhc.py``) of the given sizes, to the tract and to the block,
prints each level's node types (``topdown.blue.footprint.node_types``) and the bytes of the
BLUE's ``(k, k)`` matrices (``covariance_bytes``): what ``release()`` checks against this
machine before measuring under ``estimator="blue"``; and what ``release_streamed()`` checks,
serially, streamed by county and by tract (``streamed_covariance_bytes``). Nothing is measured,
so it takes seconds per state (the states' generation).

    python benchmarks/blue_footprint.py --persons 20000 100000 750000
"""

from __future__ import annotations

import argparse
import sys

from benchmarks.dhc import make_dhc_state
from topdown.blue.blocks import blocks_of
from topdown.blue.footprint import covariance_bytes, node_types, streamed_covariance_bytes
from topdown.measurement.tree import geography_tree, physical_memory
from topdown.presets import census2020_dhcp

DEPTHS = {
    "tract": ("STATE", "COUNTY", "TRACT"),
    "block": ("STATE", "COUNTY", "TRACT", "BLOCK_GROUP", "BLOCK"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", type=int, nargs="+", default=[20_000, 100_000, 750_000])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print("# python benchmarks/blue_footprint.py " + " ".join(sys.argv[1:]))
    memory = physical_memory()
    if memory is not None:
        print(f"# this machine's memory: {memory / 1e9:.1f} GB")
    print(
        f"{'persons':>9}  {'to':<6} {'node types per level':<28} {'covariances':>12}"
        f" {'by COUNTY':>10} {'by TRACT':>10}"
    )
    for persons in args.persons:
        state = make_dhc_state(persons, args.seed)
        for depth, hierarchy in DEPTHS.items():
            schema, strategy = census2020_dhcp(hierarchy)
            geography = state.geography[list(hierarchy)].drop_duplicates()
            tree = geography_tree(geography.reset_index(drop=True), schema)
            queries = [q for lv in strategy.levels for q, _ in lv.queries]
            blocks = blocks_of(schema.domain, queries)
            need = covariance_bytes(tree, blocks)
            streamed = [
                f"{streamed_covariance_bytes(tree, blocks, hierarchy.index(c) + 1) / 1e9:.1f} GB"
                if c in hierarchy[:-1]
                else "-"
                for c in ("COUNTY", "TRACT")
            ]
            types = str(node_types(tree))
            print(
                f"{persons:>9,}  {depth:<6} {types:<28} {need / 1e9:>9.1f} GB"
                f" {streamed[0]:>10} {streamed[1]:>10}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
