#!/usr/bin/env python3
"""The code blocks of the README and of docs/, for test/docs/run.

  examples.py sql OUTDIR FILE...   writes each ```sql block of the FILEs, in
                                   order, to OUTDIR/NNN.sql, and prints one
                                   line per block: NNN FILE:LINE MODE [ARG]
  examples.py sh FILE...           checks the ```sh blocks: every command of
                                   this repository they run exists, and every
                                   --option given to it is one the script
                                   names; prints the problems, exits 1 if any
  examples.py links FILE...        checks the relative links [text](path#anchor):
                                   the path exists, and the anchor is one of
                                   its headings; exits 1 if one does not

MODE is `run` (the block must run without error), `skip` (not run; the
reason is in the marker) or `expect-error` (ARG is the SQLSTATE that each
failing statement of the block must raise; at least one must fail). A block
is run unless the line before its fence is one of
  <!-- example: skip (why it cannot run as written) -->
  <!-- example: expect-error SQLSTATE -->
so every exception is visible in the document itself.
"""
import os
import re
import sys

MARKER = re.compile(r"^<!-- example: (skip \(.+\)|expect-error [0-9A-Z]{5}) -->$")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def blocks(path, lang):
    """(line of the fence, marker or None, text) of each block in LANG."""
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```" + lang:
            start = i + 1
            prev = lines[i - 1].strip() if i > 0 else ""
            marker = MARKER.match(prev)
            if prev.startswith("<!-- example:") and not marker:
                sys.exit(f"{path}:{i}: malformed example marker: {prev}")
            j = start
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            if j == len(lines):
                sys.exit(f"{path}:{start}: unterminated ```{lang} block")
            yield start, marker.group(1) if marker else None, "\n".join(lines[start:j]) + "\n"
            i = j
        i += 1


def cmd_sql(outdir, files):
    n = 0
    for path in files:
        for line, marker, text in blocks(path, "sql"):
            n += 1
            name = f"{n:03d}"
            with open(os.path.join(outdir, name + ".sql"), "w", encoding="utf-8") as f:
                f.write(text)
            if marker is None:
                mode = "run"
            elif marker.startswith("skip"):
                mode = "skip"
            else:
                mode = marker  # "expect-error XXXXX"
            print(f"{name} {path}:{line} {mode}")
    if n == 0:
        sys.exit("no ```sql blocks found")


# A command of this repository: ./scripts/x, scripts/x, bench/x, test/.../x,
# examples/x, as the first word of a line (after an optional VAR=value).
COMMAND = re.compile(r"^(?:[A-Z_]+=\S+\s+)*(\./)?((?:scripts|bench|test|examples)/[\w./-]+)(.*)$")


def cmd_sh(files):
    problems = []
    for path in files:
        for line, marker, text in blocks(path, "sh"):
            if marker and marker.startswith("skip"):
                continue
            for k, cmd in enumerate(text.split("\n")):
                cmd = cmd.split("#", 1)[0].strip()
                m = COMMAND.match(cmd)
                if not m:
                    continue
                script = os.path.join(ROOT, m.group(2))
                where = f"{path}:{line + k}"
                if not (os.path.isfile(script) and os.access(script, os.X_OK)):
                    problems.append(f"{where}: {m.group(2)} is not an executable of this repository")
                    continue
                source = open(script, encoding="utf-8", errors="replace").read()
                for opt in re.findall(r"(?:^|\s)(--[a-z][a-z-]*)", m.group(3)):
                    if opt not in source:
                        problems.append(f"{where}: {m.group(2)} does not take {opt}")
                print(f"checked {where}: {cmd}")
    for p in problems:
        print(p, file=sys.stderr)
    sys.exit(1 if problems else 0)


LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading):
    """The anchor GitHub gives a heading."""
    s = heading.strip().lower().replace("`", "")
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, flags=re.M)}


def cmd_links(files):
    problems = []
    for path in files:
        text = open(path, encoding="utf-8").read()
        for m in LINK.finditer(text):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target):
                continue  # https:, mailto:
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            if not os.path.exists(dest):
                problems.append(f"{path}: link to {target}: no {dest}")
            elif anchor and (not dest.endswith(".md") or anchor not in anchors(dest)):
                problems.append(f"{path}: link to {target}: no heading #{anchor} in {dest}")
    for p in problems:
        print(p, file=sys.stderr)
    sys.exit(1 if problems else 0)


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "sql":
        cmd_sql(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) >= 3 and sys.argv[1] == "sh":
        cmd_sh(sys.argv[2:])
    elif len(sys.argv) >= 3 and sys.argv[1] == "links":
        cmd_links(sys.argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
