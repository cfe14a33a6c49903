#!/usr/bin/env python3
"""Check the relative links of README.md and docs/*.md: every linked file exists and
every #anchor names a heading of its file (GitHub's slugs). Prints one line per broken
link and exits 1 if there is any, so a doc moved or a heading renamed is caught.

Usage: scripts/check_links.py [FILE.md ...]   (default: README.md docs/*.md)
"""
import glob
import os
import re
import sys

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def slug(title):
    # GitHub: lowercase, drop everything but letters, digits, spaces, hyphens and
    # underscores, then each space becomes a hyphen (runs are kept, not collapsed).
    s = title.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def prose_lines(path):
    """Lines outside fenced code blocks: links and headings there are not rendered."""
    fence = False
    for line in open(path, encoding="utf-8"):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if not fence:
            yield line


def anchors(path):
    seen = {}
    out = set()
    for line in prose_lines(path):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def main(files):
    bad = 0
    cache = {}
    for f in files:
        for no, line in enumerate(prose_lines(f), 1):
            # Inline code may hold brackets that are not links.
            for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
                if re.match(r"^[a-z]+:", target):
                    continue  # http:, https:, mailto: are not checked here
                path, _, frag = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
                if not os.path.exists(dest):
                    print(f"{f}: link to missing file: {target}")
                    bad += 1
                    continue
                if frag and dest.endswith(".md"):
                    if dest not in cache:
                        cache[dest] = anchors(dest)
                    if frag not in cache[dest]:
                        print(f"{f}: no heading for #{frag} in {dest}")
                        bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    args = sys.argv[1:] or ["README.md"] + sorted(glob.glob("docs/*.md"))
    sys.exit(main(args))
