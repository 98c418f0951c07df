#!/usr/bin/env python3
"""slugify: a container transform. Reads batches as JSON lines on stdin, writes answers on stdout.

Request:  {"id": 7, "rows": [{"id": 1, "title": "Crème Brûlée"}, ...]}
Answer:   {"id": 7, "results": [[{"id": 1, "title": "Crème Brûlée", "slug": "creme-brulee"}], ...]}

A row whose title is not a string gets {"error": "..."} (it becomes poison, the rest go on).
A row with title "#split" gives two rows (flat-map); "#drop" gives none (filter).
For the tests: title "#exit" makes the process exit, "#hang" makes it hang, "#slow" takes 0.5 s.
"""
import json
import re
import sys
import time
import unicodedata


def slug(text: str) -> str:
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")


def transform(row):
    title = row.get("title")
    if not isinstance(title, str):
        return {"error": "title is not a string"}
    if title == "#exit":
        sys.exit(3)
    if title == "#hang":
        time.sleep(3600)
    if title == "#slow":
        time.sleep(0.5)
        return [dict(row, slug="slow")]
    if title == "#drop":
        return []
    if title == "#split":
        return [dict(row, slug="split-1"), dict(row, slug="split-2")]
    return [dict(row, slug=slug(title))]


def main():
    print("slugify ready", file=sys.stderr, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            answer = {"id": request["id"], "results": [transform(row) for row in request["rows"]]}
        except Exception as error:  # the whole batch fails: the stream isolates the bad rows
            answer = {"id": request.get("id"), "error": f"{type(error).__name__}: {error}"}
        sys.stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
