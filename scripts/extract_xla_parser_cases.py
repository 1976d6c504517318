"""Extract the HLO module strings of XLA's parser test into test data.

    python scripts/extract_xla_parser_cases.py hlo_parser_test.cc \
        --commit <40 hex> > tests/data/xla/parser_cases.json

Reads `xla/hlo/parser/hlo_parser_test.cc` (openxla/xla) and writes one JSON record per module
string the test parses, with what the test expects of it:

    {"name": "CreateTestCases/AxpyParam", "text": "HloModule ...", "expect": "ok" | "error",
     "verified": true | false,          # ParseAndReturnVerifiedModule (parser + verifier) or not
     "roundtrip": true | false,         # the test also checks print(parse(text)) == text
     "message": "...",                  # for "error": the substring XLA's message must contain
     "replica_count": 1}

Sources, in file order: the round-trip tables `CreateTestCases` and `CreateShortTestCases`
(expect ok, verified, roundtrip), `CreateNonRoundtripTestCases` (the input string: expect ok,
verified), and every `TEST`/`TEST_F` body that hands a string to `ParseAndReturn...Module`: the
first string literal assigned in the body is the module; failure markers (`EXPECT_NE(OkStatus`,
`ExpectHasSubstr(ParseAndReturn...`, `StatusIs(`, `ASSERT_FALSE(...ok())`, ...) make it an
"error" case, success markers (`TF_EXPECT_OK`, `ASSERT_OK...`, `EXPECT_EQ(OkStatus`) an "ok"
case. Bodies built with `StrCat`/`StrFormat` are expanded by hand (`TEMPLATED`); bodies that test
another entry point (`ParseShape`, `ParseSharding`, ...) or a parser option hlofuse does not have
(`max_recursion_depth`) are skipped and listed in the output's `skipped` table with the reason.
Only the module strings reach the output, never the C++ test code.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

_RAW_START = re.compile(r'R"([^(\s]{0,16})\(')
_TEST_HEAD = re.compile(r"^TEST(?:_F)?\(\s*(\w+)\s*,\s*(\w+)\s*\)\s*\{", re.M)
_TABLE_HEAD = re.compile(r"std::vector<(\w+)> (Create\w*TestCases)\(\)\s*\{")
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "?": "?",
                   "0": "\0"}

# Markers are matched against the body with all whitespace removed.
FAIL_MARKERS = re.compile(r"EXPECT_NE\(absl::OkStatus\(\)|ExpectHasSubstr\(ParseAndReturn|"
                          r"ExpectHasSubstr\(result\.status\(\)|StatusIs\(|"
                          r"ASSERT_FALSE\([\w.()]*\.ok\(\)\)|EXPECT_FALSE\(result\.ok\(\)\)|"
                          r"ASSERT_TRUE\(!")
OK_MARKERS = ("TF_EXPECT_OK(", "ASSERT_OK(", "ASSERT_OK_AND_ASSIGN(", "EXPECT_EQ(absl::OkStatus()",
              "EXPECT_TRUE(ParseAndReturnUnverifiedModule(")
OTHER_ENTRY_POINTS = ("ParseShape(", "ParseSharding(", "ParseFrontendAttributes(", "ParseWindow(",
                      "ParseConvolutionDimensionNumbers(", "ParseReplicaGroupsOnly(",
                      "ParsePaddingConfig(", "LexesAsJsonDict(")


@dataclass
class Lit:
    start: int
    end: int
    value: str


def string_literals(src: str) -> list[Lit]:
    """Every C++ string literal outside comments, adjacent literals concatenated."""
    out: list[Lit] = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            i = src.find("\n", i)
            i = n if i < 0 else i
            continue
        if src.startswith("/*", i):
            i = src.find("*/", i) + 2
            continue
        if c == "'":  # a char literal: skip it
            j = i + 1
            while src[j] != "'":
                j += 2 if src[j] == "\\" else 1
            i = j + 1
            continue
        m = _RAW_START.match(src, i)
        if m:
            close = ")" + m.group(1) + '"'
            end = src.index(close, m.end())
            lit = Lit(i, end + len(close), src[m.end():end])
        elif c == '"':
            j, buf = i + 1, []
            while src[j] != '"':
                if src[j] == "\\":
                    buf.append(_SIMPLE_ESCAPES.get(src[j + 1], "\\" + src[j + 1]))
                    j += 2
                else:
                    buf.append(src[j])
                    j += 1
            lit = Lit(i, j + 1, "".join(buf))
        else:
            i += 1
            continue
        if out and src[out[-1].end:lit.start].strip() == "":
            out[-1] = Lit(out[-1].start, lit.end, out[-1].value + lit.value)
        else:
            out.append(lit)
        i = lit.end
    return out


def _body_end(src: str, open_brace: int) -> int:
    """The offset just after the `}` matching the `{` at `open_brace` (strings skipped)."""
    depth = 0
    lits = {lit.start: lit.end for lit in string_literals(src[open_brace:])}
    i = open_brace
    while True:
        rel = i - open_brace
        if rel in lits:
            i = open_brace + lits[rel]
            continue
        if src[i] == "{":
            depth += 1
        elif src[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1


def tables(src: str) -> list[dict[str, object]]:
    records: list[dict[str, object]] = []
    for m in _TABLE_HEAD.finditer(src):
        kind, fn = m.group(1), m.group(2)
        body_start = m.end() - 1
        body = src[body_start:_body_end(src, body_start)]
        lits = string_literals(body)
        step = 3 if kind == "NonRoundtripTestData" else 2
        for k in range(0, len(lits), step):
            name, text = lits[k].value, lits[k + 1].value
            tail_end = lits[k + step].start if k + step < len(lits) else len(body)
            tail = body[lits[k + step - 1].end:tail_end]
            rc = re.search(r"/\*replica_count=\*/\s*(\d+)", tail)
            records.append({
                "name": f"{fn}/{name}", "text": text, "expect": "ok", "verified": True,
                "roundtrip": step == 2, "replica_count": int(rc.group(1)) if rc else 1,
            })
    return records


# Bodies built from templates: the strings XLA's test builds, written out.
def _templated(src: str) -> dict[str, list[tuple[str, str]]]:
    """test name -> [(suffix, text)], expanded the way the C++ does."""
    out: dict[str, list[tuple[str, str]]] = {}
    for m in _TEST_HEAD.finditer(src):
        name = m.group(2)
        body = src[m.end() - 1:_body_end(src, m.end() - 1)]
        lits = [lit.value for lit in string_literals(body)]
        if name == "InvalidDimLabels":
            prefix, suffix = lits[0], lits[1]
            out[name] = [(str(k), prefix + lits[2 + 2 * k] + suffix) for k in range(3)]
        elif name == "AllReduceWithMode":
            template = lits[0]
            out[name] = [("with_mode", template.replace("%s", "mode=cross_replica,")),
                         ("without_mode", template.replace("%s", ""))]
    return out


TEMPLATED_EXPECT = {"InvalidDimLabels": "error", "AllReduceWithMode": "ok"}


def tests(src: str) -> tuple[list[dict[str, object]], dict[str, str]]:
    records: list[dict[str, object]] = []
    skipped: dict[str, str] = {}
    templated = _templated(src)
    for m in _TEST_HEAD.finditer(src):
        suite, name = m.group(1), m.group(2)
        body = src[m.end() - 1:_body_end(src, m.end() - 1)]
        key = f"{suite}/{name}"
        if name in templated:
            for suffix, text in templated[name]:
                records.append({"name": f"{key}#{suffix}", "text": text,
                                "expect": TEMPLATED_EXPECT[name],
                                "verified": "ParseAndReturnVerifiedModule" in body,
                                "roundtrip": False, "replica_count": 1})
            continue
        if "ParseAndReturn" not in body:
            reason = ("tests another entry point" if any(e in body for e in OTHER_ENTRY_POINTS)
                      else "parses no module")
            skipped[key] = reason
            continue
        if "set_max_recursion_depth" in body:
            skipped[key] = "sets a parser option hlofuse does not have (max_recursion_depth)"
            continue
        depth = re.search(r"kDepth = (\d+);", body)
        if depth:  # `add(f32[] ` nested kDepth deep, built in C++: the loader builds it
            records.append({"name": key, "text": None, "expect": "error", "verified": False,
                            "roundtrip": False, "replica_count": 1,
                            "generator": {"kind": "nested_add", "depth": int(depth.group(1))}})
            continue
        lits = string_literals(body)
        if not lits:
            skipped[key] = "no module string"
            continue
        flat = re.sub(r"\s+", "", body)
        fail = FAIL_MARKERS.search(flat) is not None
        ok = any(mk in flat for mk in OK_MARKERS)
        if fail == ok:
            skipped[key] = "expectation not recognised"
            continue
        message = ""
        sub = re.search(r"(?:HasSubstr|ExpectHasSubstr)\([^;]*?\"", body)
        if fail and sub:
            after = [lit.value for lit in lits if lit.start >= sub.end() - 1]
            message = after[0] if after else ""
        records.append({
            "name": key, "text": lits[0].value, "expect": "error" if fail else "ok",
            "verified": "ParseAndReturnVerifiedModule" in body, "roundtrip": False,
            "replica_count": 1, **({"message": message} if message else {}),
        })
    return records, skipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source", help="path of xla/hlo/parser/hlo_parser_test.cc")
    ap.add_argument("--commit", required=True, help="the openxla/xla commit it was read at")
    args = ap.parse_args(argv)
    src = Path(args.source).read_text(encoding="utf-8")
    cases = tables(src)
    more, skipped = tests(src)
    cases += more
    json.dump({"source": "openxla/xla:xla/hlo/parser/hlo_parser_test.cc",
               "commit": args.commit, "license": "Apache-2.0", "cases": cases,
               "skipped": skipped}, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
