"""Unit tests of layout.py."""

import pathlib
import unittest

from doctools import layout

DOC = """# x
## Layout of the code

```
src/main.rs         read env
src/wire/ port.rs    the wiring, and its bridge port
src/verbs/          one verb each
tests/it/           root tests: one binary, one module
                    per concern, helpers in common/
docs/, scripts/     the write-ups
```
## Next
```
src/not_layout.rs   another block
```
"""


class Listed(unittest.TestCase):
    def test_paths_names_in_the_same_folder_and_lists(self):
        self.assertEqual(layout.listed(DOC), [
            "src/main.rs", "src/wire/", "src/wire/port.rs", "src/verbs/", "tests/it/",
            "docs/", "scripts/"])

    def test_no_block(self):
        self.assertEqual(layout.listed("# x\n"), [])


class Problems(unittest.TestCase):
    def test_a_listed_path_that_is_gone(self):
        exists = lambda p: p != "src/wire/port.rs"
        self.assertEqual(layout.problems(DOC, exists, ["main.rs", "wire/", "verbs/"]),
                         ["docs/design.md layout: src/wire/port.rs does not exist"])

    def test_a_module_that_is_not_listed(self):
        found = layout.problems(DOC, lambda p: True,
                                ["main.rs", "verbs/", "firewall/", "gc_tests.rs"])
        self.assertEqual(found, ["docs/design.md layout: src/firewall/ is not listed"])

    def test_messages_name_the_doc_given(self):
        found = layout.problems(DOC, lambda p: True, ["main.rs", "verbs/", "gc.rs"], "x.md")
        self.assertEqual(found, ["x.md layout: src/gc.rs is not listed"])

    def test_no_block_is_a_problem(self):
        self.assertEqual(len(layout.problems("# x\n", lambda p: True, [])), 1)


class TheRealDoc(unittest.TestCase):
    def test_the_doc_check_refs_reads_has_the_block(self):
        doc = pathlib.Path(__file__).resolve().parents[2] / layout.DOC
        self.assertIn(layout.HEADING, doc.read_text())
        self.assertIn("src/lib.rs", layout.listed(doc.read_text()))


if __name__ == "__main__":
    unittest.main()
