#!/usr/bin/env python3
"""Reads a page Chromium dumped (--dump-dom) and prints one thing of it, for the dashboard's
browser test (test_dashboard.sh):
  dom_query.py FILE attr ID NAME     the attribute NAME of the element with id ID ("" if none)
  dom_query.py FILE text ID          the text inside the element with id ID
  dom_query.py FILE rows TABLE_ID    the rows of that table's body, one per line, cells joined by |
  dom_query.py FILE jobs             the job list: "ID STATE" per row
Exits 1 when the element is not in the page."""
import sys
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.children = tag, dict(attrs), parent, []

    def text(self):
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def walk(self):
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.walk()


class Tree(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        n = Node(tag, attrs, self.cur)
        self.cur.children.append(n)
        if tag not in VOID:
            self.cur = n

    def handle_endtag(self, tag):
        n = self.cur
        while n is not self.root and n.tag != tag:
            n = n.parent
        if n is not self.root:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.children.append(data)


def main():
    path, what, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    t = Tree()
    with open(path, encoding="utf-8", errors="replace") as f:
        t.feed(f.read())
    nodes = list(t.root.walk())
    by_id = {n.attrs.get("id"): n for n in nodes if n.attrs.get("id")}
    if what == "jobs":
        for n in nodes:
            if n.tag == "tr" and "job-row" in n.attrs.get("class", "").split():
                print(n.attrs.get("data-id", ""), n.attrs.get("data-state", ""))
        return 0
    if not args or args[0] not in by_id:
        return 1
    el = by_id[args[0]]
    if what == "attr":
        print(el.attrs.get(args[1]) or "")
    elif what == "text":
        print(el.text())
    elif what == "rows":
        for body in (c for c in el.children if isinstance(c, Node) and c.tag == "tbody"):
            for tr in (c for c in body.children if isinstance(c, Node) and c.tag == "tr"):
                print("|".join(td.text() for td in tr.children
                               if isinstance(td, Node) and td.tag in ("td", "th")))
    else:
        print("dom_query.py: unknown query " + what, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
