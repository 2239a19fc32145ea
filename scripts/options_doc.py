#!/usr/bin/env python3
"""Regenerate the options table in docs/options.md from hudilite/options.py (the one declaration)."""
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
from hudilite.options import render_doc  # noqa: E402

doc = os.path.join(ROOT, "docs", "options.md")
with open(doc, encoding="utf-8") as f:
    text = render_doc(f.read())
with open(doc, "w", encoding="utf-8") as f:
    f.write(text)
