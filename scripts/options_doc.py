#!/usr/bin/env python3
"""Regenerate the option tables of docs/options.md from hudilite/options.py (the one declaration);
`--markdown` prints them instead."""
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
from hudilite.options import main  # noqa: E402

sys.exit(main())
